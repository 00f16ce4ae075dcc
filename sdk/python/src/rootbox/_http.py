"""The SDK's one way to the API: http.client with one kept-alive connection, the api_key as a
Bearer token, answers other than 2xx raised as RootboxError. Retries only where the API says a
retry may succeed: a 429 (refused before any work), or a 503 of an idempotent call (GET, PUT,
DELETE), each with a Retry-After of at most ``max_retry_wait`` seconds, at most ``max_retries``
times. No client-side timeout unless one is given: an exec runs as long as the API lets it."""

import http.client
import json
import ssl
import time
import urllib.parse

from .errors import RootboxError, error_of

IDEMPOTENT = {"GET", "HEAD", "PUT", "DELETE"}


class Transport:
    def __init__(self, base_url, api_key=None, ca_file=None, max_retries=2, max_retry_wait=30, timeout=None):
        u = urllib.parse.urlsplit(base_url)
        if u.scheme not in ("http", "https") or not u.hostname:
            raise ValueError(f"base_url must be an http(s) URL: {base_url!r}")
        self.scheme = u.scheme
        self.host = u.hostname
        self.port = u.port
        self.prefix = u.path.rstrip("/")
        self.api_key = api_key
        self.max_retries = max_retries
        self.max_retry_wait = max_retry_wait
        self.timeout = timeout
        self.context = ssl.create_default_context(cafile=ca_file) if self.scheme == "https" else None
        self._conn = None

    def _connection(self):
        if self._conn is None:
            if self.scheme == "https":
                self._conn = http.client.HTTPSConnection(self.host, self.port, timeout=self.timeout, context=self.context)
            else:
                self._conn = http.client.HTTPConnection(self.host, self.port, timeout=self.timeout)
        return self._conn

    def url(self, path, query=None):
        q = {k: ("1" if v is True else str(v)) for k, v in (query or {}).items() if v is not None and v is not False}
        return self.prefix + "/" + path.lstrip("/") + ("?" + urllib.parse.urlencode(q) if q else "")

    def open(self, method, path, query=None, json_body=None, body=None, headers=None, anonymous=False):
        """The answer of a 2xx, its body not read yet (read it whole before the next call)."""
        h = {"accept": "application/json"}
        h.update(headers or {})
        if self.api_key and not anonymous:
            h["authorization"] = f"Bearer {self.api_key}"
        if json_body is not None:
            body = json.dumps(json_body).encode()
            h["content-type"] = "application/json"
        if isinstance(body, str):
            body = body.encode()
        if body is None and method not in ("GET", "HEAD"):
            body = b""
        target = self.url(path, query)
        attempt = 0
        while True:
            res = self._send(method, target, body, h)
            if 200 <= res.status < 300:
                return res
            err = error_of(res.status, res.read().decode("utf-8", "replace"), {k.lower(): v for k, v in res.getheaders()})
            retryable = res.status == 429 or (res.status == 503 and method in IDEMPOTENT)
            wait = err.retry_after
            if not retryable or wait is None or wait > self.max_retry_wait or attempt >= self.max_retries:
                raise err
            attempt += 1
            time.sleep(wait)

    def _send(self, method, target, body, headers):
        # a kept-alive connection the server closed while it was idle (it never read the
        # request) is opened again once; a new connection failing is the caller's to see
        while True:
            reused = self._conn is not None
            conn = self._connection()
            try:
                conn.request(method, target, body=body, headers=headers)
                return conn.getresponse()
            except (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError) as e:
                self.close()
                if not reused:
                    raise RootboxError(0, "connection_failed", f"{method} {self.host}: {e}") from e
            except (OSError, http.client.HTTPException) as e:
                self.close()
                raise RootboxError(0, "connection_failed", f"{method} {self.host}: {e}") from e

    def json(self, method, path, **kw):
        text = self.open(method, path, **kw).read()
        return json.loads(text) if text else {}

    def close(self):
        if self._conn is not None:
            self._conn.close()
            self._conn = None
