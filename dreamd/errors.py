"""The error tree and exit codes: every failure dreamd reports to a person is one of these."""

# Exit codes, as `dreamd --help` lists them (and docs/reference/exit-codes.md, from here).
EXIT_OK = 0  # done
EXIT_JOB_FAILED = 1  # a pass ran, and a job failed (see `dreamd status`)
EXIT_BAD_INPUT = 2  # bad input or config: one line, nothing written
EXIT_ALREADY_RUNNING = 3  # another dreamd holds the memory file
EXIT_BUSY = 4  # the memory file stayed locked by another process past the busy timeout
EXIT_INTERNAL = 70  # a bug in dreamd (EX_SOFTWARE): one line, please report it
EXIT_PIPE_CLOSED = 141  # the reader closed stdout (`| head`): 128 + SIGPIPE, as a shell says


class DreamdError(Exception):
    """Something dreamd cannot do; the message is one line meant for a person."""

    exit_code = EXIT_BAD_INPUT

    def for_operator(self) -> str:
        """The line for whoever runs dreamd on the memory file itself (the command line),
        which may say more than an API caller is told."""
        return str(self)


class ConfigError(DreamdError):
    """A configuration file, environment variable or flag is unknown or invalid."""


class StoreError(DreamdError):
    """The memory file cannot be opened, migrated or used as dreamd needs."""


class NotMigrated(StoreError):
    """A read-only command met a file dreamd has not (fully) set up yet."""


class StoreAway(StoreError):
    """The store's server did not answer, or dropped the connection: it is down,
    restarting or failing over, or the connection was killed."""


class StoreBusy(StoreError):
    """Another process held the memory file locked for longer than the busy timeout."""

    exit_code = EXIT_BUSY


class ImportFormatError(DreamdError):
    """An import file is not in the format it was said to be; names the file and place."""


class UnknownUser(DreamdError):
    """A user or session the memory file does not hold (a typo, most often)."""

    def __init__(self, message: str, known: str = "") -> None:
        super().__init__(message)
        self.known = known  # who is there: for the operator, never for an API caller

    def for_operator(self) -> str:
        return f"{self}; known users: {self.known} (dreamd users lists them)" \
            if self.known else str(self)


class NotPermitted(DreamdError):
    """The request's token may not do this (read, write or erase, or every user's view)."""


class UnknownFact(DreamdError):
    """A fact id the user does not hold: none by that id, or another user's (the two are
    not told apart, so a caller learns nothing of other users' facts)."""


class UnknownCorrection(DreamdError):
    """A correction id the user does not hold (none by that id, or another user's)."""


class StaleVersion(DreamdError):
    """A change sent with the version of a fact it read, which has changed since: someone
    else changed it meanwhile (over HTTP: 412)."""

    def __init__(self, message: str, current: int) -> None:
        super().__init__(message)
        self.current = current  # the fact's version now


class NotCorrectable(DreamdError):
    """A correction that cannot apply to the fact as it stands (retracting a retracted
    fact, reverting a revert, empty or overlong words)."""


class SessionTaken(DreamdError):
    """A turn for a session that belongs to another user: filing it would mix users."""


class AlreadyRunning(DreamdError):
    """Another dreamd holds the memory file's lock."""

    exit_code = EXIT_ALREADY_RUNNING


class BackendError(DreamdError):
    """A Completer or Embedder failed to produce usable output."""

    part = "completer"  # which backend: "completer" or "embedder"


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


class Stopping(BackendError):
    """dreamd was asked to stop: no new call or retry starts."""


# Errors that stop all LLM work for the rest of the pass and burn no attempts.
PASS_STOPPING = (BackendMisconfigured, BreakerOpen, BudgetExhausted, Stopping)
