"""The error tree: every failure dreamd reports to a person is one of these."""


class DreamdError(Exception):
    """Something dreamd cannot do; the message is one line meant for a person."""


class ConfigError(DreamdError):
    """A configuration file, environment variable or flag is unknown or invalid."""


class StoreError(DreamdError):
    """The memory file cannot be opened, migrated or used as dreamd needs."""


class AlreadyRunning(DreamdError):
    """Another dreamd holds the memory file's lock."""


class BackendError(DreamdError):
    """A Completer or Embedder failed to produce usable output."""


class ModelFileError(BackendError):
    """The embedded model's files are missing or differ from the pinned version."""


class OutputInvalid(BackendError):
    """A backend answered, but the answer failed validation."""


class InputRejected(BackendError):
    """The backend refused this input (400/413/422): shrink or split it, then quarantine."""


class BackendMisconfigured(BackendError):
    """A configuration problem (401/403/404, unknown model): no LLM work until fixed."""


class BackendUnavailable(BackendError):
    """A transient failure (408/409/429/5xx, connection, timeout) that outlived retries."""


class BreakerOpen(BackendError):
    """Too many transient failures in a row: no calls until the cool-down has passed."""


class BudgetExhausted(BackendError):
    """The next call would exceed the token budget for this pass or day."""


# Errors that stop all LLM work for the rest of the pass and burn no attempts.
PASS_STOPPING = (BackendMisconfigured, BreakerOpen, BudgetExhausted)
