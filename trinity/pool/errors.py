"""Typed errors of the pool client.

Two families: configuration errors (raised by `PoolClient.from_config`, before any work starts) and call
failures (raised inside one call, caught by `PoolClient.chat` and returned as `CallResult(ok=False)`, so
a failing pool model costs an episode a turn but never crashes a generation).
`CallFailure.retryable` is the single fact the retry loop looks at.
"""

from __future__ import annotations

from trinity.errors import ConfigError, TrinityError


class PoolError(TrinityError):
    """Any failure of the pool client."""


# --- configuration: raised at construction time -------------------------------------------------

class PoolConfigError(PoolError, ConfigError):
    """The pool configuration cannot be used (unknown provider, no base URL, ...)."""


class MissingApiKeyError(PoolConfigError):
    """A model needs an API key and the environment variable that should hold it is not set."""

    def __init__(self, model: str, env_var: str):
        self.model = model
        self.env_var = env_var
        super().__init__(
            f"pool model '{model}' needs an API key in ${env_var}, which is not set; "
            f"export it (keys are read from the environment only and never stored)"
        )


class UnknownModelError(PoolError, KeyError):
    """`chat` was asked for a model name that is not in the pool (a programming error: it raises)."""

    def __str__(self) -> str:  # KeyError would print the repr of its argument
        return str(self.args[0]) if self.args else "unknown pool model"


class CacheError(PoolError):
    """The response cache file cannot be opened or is not a response cache."""


# --- call failures: become CallResult(ok=False, error=str(e), error_kind=type(e).__name__) --------

class CallFailure(PoolError):
    """One chat call failed. Subclasses say whether sending the same request again may succeed."""

    retryable = False


class PoolTimeoutError(CallFailure):
    """No complete reply within the call's timeout."""

    retryable = True


class PoolConnectionError(CallFailure):
    """The connection failed or was dropped (refused, reset, closed mid-reply, truncated body)."""

    retryable = True


class HTTPStatusError(CallFailure):
    """The server answered with a non-2xx status."""

    def __init__(self, status: int, message: str, *, retry_after_s: float | None = None):
        self.status = status
        self.retry_after_s = retry_after_s
        super().__init__(f"http {status}: {message}" if message else f"http {status}")


class BadRequestError(HTTPStatusError):
    """400: the request itself is wrong; sending it again cannot help."""


class AuthenticationError(HTTPStatusError):
    """401: the API key is missing or wrong."""


class PermissionDeniedError(HTTPStatusError):
    """403."""


class NotFoundError(HTTPStatusError):
    """404: usually a wrong base URL or model id."""


class RequestTimeoutError(HTTPStatusError):
    """408: the server gave up waiting for us; retried."""

    retryable = True


class ConflictError(HTTPStatusError):
    """409: a transient conflict on the provider side; retried."""

    retryable = True


class UnprocessableEntityError(HTTPStatusError):
    """422."""


class RateLimitError(HTTPStatusError):
    """429: retried after the server's Retry-After when it sends one."""

    retryable = True


class ServerError(HTTPStatusError):
    """5xx: retried."""

    retryable = True


_STATUS_ERRORS: dict[int, type[HTTPStatusError]] = {
    400: BadRequestError,
    401: AuthenticationError,
    403: PermissionDeniedError,
    404: NotFoundError,
    408: RequestTimeoutError,
    409: ConflictError,
    422: UnprocessableEntityError,
    429: RateLimitError,
}


def status_error(status: int, message: str, *, retry_after_s: float | None = None) -> HTTPStatusError:
    """The typed error for an HTTP status (5xx -> ServerError, unknown 4xx -> HTTPStatusError)."""
    cls = ServerError if status >= 500 else _STATUS_ERRORS.get(status, HTTPStatusError)
    return cls(status, message, retry_after_s=retry_after_s)


class MalformedResponseError(CallFailure):
    """A 2xx reply whose body is not a chat completion (invalid JSON, no choices). Not retried: a server
    that answers garbage once usually answers garbage again, and retrying would hide the bug."""


class CacheMissError(CallFailure):
    """replay_only mode and the request is not in the response cache."""


class BudgetExhaustedError(CallFailure):
    """The run budget is spent; the call was refused before reaching the network."""
