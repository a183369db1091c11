"""The error tree: every failure dreamd reports to a person is one of these."""


class DreamdError(Exception):
    """Something dreamd cannot do; the message is one line meant for a person."""


class ConfigError(DreamdError):
    """A configuration file, environment variable or flag is unknown or invalid."""


class StoreError(DreamdError):
    """The memory file cannot be opened, migrated or used as dreamd needs."""


class BackendError(DreamdError):
    """A Completer or Embedder failed to produce usable output."""


class ModelFileError(BackendError):
    """The embedded model's files are missing or differ from the pinned version."""


class OutputInvalid(BackendError):
    """A backend answered, but the answer failed validation."""
