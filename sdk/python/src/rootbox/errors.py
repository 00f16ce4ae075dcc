"""The one error the SDK raises for an answer of the API that is not a success."""

import json


class RootboxError(Exception):
    """An answer that is not a success: the API's stable ``code`` (``invalid_api_key``,
    ``server_not_found``, ``free_tier_exceeded`` ...; ``connection_failed`` when no answer came),
    its ``detail``, the HTTP ``status`` (0 without an answer), ``retry_after`` (seconds, when
    waiting helps), ``request_id`` and the whole JSON ``body``."""

    def __init__(self, status, code, detail, retry_after=None, request_id=None, body=None):
        super().__init__(f"{code}: {detail}")
        self.status = status
        self.code = code
        self.detail = detail
        self.retry_after = retry_after
        self.request_id = request_id
        self.body = body or {}


class PaymentRequiredError(RootboxError):
    """402: the free grant is used up without credit (``free_tier_exceeded``), the server is
    suspended, or a recharge needs its x402 payment. ``recharge_url`` says where to add credit;
    ``accepts`` holds the x402 terms of a recharge."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        b = self.body
        resource = b.get("resource") if isinstance(b.get("resource"), dict) else {}
        self.recharge_url = b.get("upgrade_url") or resource.get("url")
        self.accepts = b.get("accepts") if isinstance(b.get("accepts"), list) else None


def error_of(status, text, headers):
    """The error for a non-2xx answer whose body was read."""
    body = {}
    try:
        j = json.loads(text)
        if isinstance(j, dict):
            body = j
    except ValueError:
        pass
    retry_after = body.get("retry_after")
    if not isinstance(retry_after, (int, float)):
        try:
            retry_after = int(headers.get("retry-after"))
        except (TypeError, ValueError):
            retry_after = None
    code = body.get("error") if isinstance(body.get("error"), str) else f"http_{status}"
    detail = body.get("detail") if isinstance(body.get("detail"), str) else (text[:200] or f"HTTP {status}")
    request_id = body.get("request_id") or headers.get("x-request-id")
    cls = PaymentRequiredError if status == 402 else RootboxError
    return cls(status, code, detail, retry_after=retry_after, request_id=request_id, body=body)
