"""rootbox: the Python client of the rootbox hosting API (standard library only, sync).

    import rootbox
    client = rootbox.Rootbox(base_url="https://api.example.com")  # no api_key: an anonymous account
    server = client.create()
    print(server.exec("uname -a").stdout)
    server.delete()
"""

import os

from ._http import Transport
from ._server import Domains, ExecResult, Files, Server, _q
from ._wire import FIELDS, LEFT_OUT_FIELDS, OPERATIONS, QUERY, UNTYPED, Record, to_wire
from .errors import PaymentRequiredError, RootboxError

__all__ = [
    "Rootbox", "Server", "Files", "Domains", "ExecResult", "Record",
    "RootboxError", "PaymentRequiredError", "OPERATIONS", "FIELDS", "LEFT_OUT_FIELDS", "QUERY", "UNTYPED",
]
__version__ = "0.1.0"


class Servers:
    def __init__(self, client):
        self._c = client

    def list(self):
        """Your servers."""
        return [Server(self._c._t, s["id"], s) for s in self._c._t.json("GET", "servers")["servers"]]

    def get(self, server_id):
        """A server by id (RootboxError server_not_found when it is not yours)."""
        s = self._c._t.json("GET", f"servers/{_q(server_id)}")
        return Server(self._c._t, s["id"], s)


class Rootbox:
    """A client. ``base_url`` defaults to $ROOTBOX_BASE_URL, ``api_key`` to $ROOTBOX_API_KEY;
    without a key, create() makes an anonymous account and the client keeps its key
    (``client.api_key``). ``ca_file``: a CA to trust (a host with its own local CA)."""

    def __init__(self, api_key=None, base_url=None, *, ca_file=None, max_retries=2, max_retry_wait=30, timeout=None):
        base_url = base_url or os.environ.get("ROOTBOX_BASE_URL")
        if not base_url:
            raise ValueError("base_url is required (or set ROOTBOX_BASE_URL)")
        key = api_key or os.environ.get("ROOTBOX_API_KEY") or None
        self._t = Transport(base_url, key, ca_file=ca_file, max_retries=max_retries, max_retry_wait=max_retry_wait, timeout=timeout)
        self.servers = Servers(self)

    @property
    def api_key(self):
        """The account's api_key: the one given, or the one an anonymous create() answered."""
        return self._t.api_key

    def create(self, slug=None, subdomains=None, never_sleep=None):
        """Creates a server (and, without an api_key, an anonymous account whose key is kept)."""
        if subdomains is None and slug is not None:
            subdomains = [slug]
        created = self._t.json("POST", "create", json_body=to_wire("CreateRequest", subdomains=subdomains, never_sleep=never_sleep))
        if created.get("api_key"):
            self._t.api_key = created["api_key"]
        return Server(self._t, created["id"], created)

    def server(self, server_id):
        """A handle on a server by id, without a request (url() needs refresh() first)."""
        return Server(self._t, server_id)

    def credits(self):
        return Record.of(self._t.json("GET", "credits"))

    def usage(self, limit=None, cursor=None):
        """The usage ledger, newest first, a page at a time (``cursor``: the previous next_cursor)."""
        return Record.of(self._t.json("GET", "usage", query={"limit": limit, "cursor": cursor}))

    def rotate_key(self):
        """Replaces the api_key (the old one stops working); the client uses the new one.
        Answers ``api_key`` and ``tier``."""
        k = Record.of(self._t.json("POST", "account/rotate-key"))
        self._t.api_key = k.api_key
        return k

    def recharge_info(self):
        return Record.of(self._t.json("GET", "account/recharge"))

    def recharge(self, usd, payment=None):
        """Adds credit, paid with x402: without ``payment`` the API answers 402 with its terms
        (PaymentRequiredError.accepts); ``payment`` is the signed X-PAYMENT payload."""
        h = {"x-payment": payment} if payment else {}
        return Record.of(self._t.json("POST", "account/recharge", json_body=to_wire("RechargeRequest", usd=usd), headers=h))

    def feedback(self, message, contact=None):
        self._t.json("POST", "feedback", json_body=to_wire("FeedbackRequest", message=message, contact=contact), anonymous=True)

    def info(self):
        """What this host offers (prices, grants, where things are)."""
        return Record.of(self._t.json("GET", "", anonymous=True))

    def health(self):
        self._t.json("GET", "healthz", anonymous=True)
        return True

    def openapi(self):
        """The API's OpenAPI 3.1 document."""
        return self._t.json("GET", "openapi.json", anonymous=True)

    def close(self):
        self._t.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
