"""Who may call and how big a request may be (how many episodes run at once: admission.py)."""

from __future__ import annotations

import hmac
from collections.abc import AsyncIterator, Mapping

from trinity.serve.schema import RequestError


def check_bearer(headers: Mapping[str, str], token: str | None) -> None:
    """Raise 401 unless `Authorization: Bearer <token>` matches (no token configured: everyone may call)."""
    if token is None:
        return
    scheme, _, given = (headers.get("authorization") or "").partition(" ")
    if scheme.lower() != "bearer" or not hmac.compare_digest(given.strip().encode(), token.encode()):
        raise RequestError(401, "missing or invalid bearer token (Authorization: Bearer <token>)",
                           code="invalid_api_key", type="authentication_error",
                           headers={"WWW-Authenticate": "Bearer"})


async def read_body(headers: Mapping[str, str], chunks: AsyncIterator[bytes], max_bytes: int) -> bytes:
    """The request body, refusing (413) more than `max_bytes`: by Content-Length before reading, and by
    counting for chunked uploads that announce no length."""
    too_big = RequestError(413, f"request body larger than {max_bytes} bytes", code="request_too_large")
    length = headers.get("content-length")
    if length is not None:
        try:
            if int(length) > max_bytes:
                raise too_big
        except ValueError:
            raise RequestError(400, "invalid Content-Length", code="invalid_value") from None
    body = bytearray()
    async for part in chunks:
        body += part
        if len(body) > max_bytes:
            raise too_big
    return bytes(body)

