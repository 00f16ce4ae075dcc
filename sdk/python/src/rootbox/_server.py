"""A server of the account: commands (one JSON answer, or NDJSON streamed to callbacks), files,
URL, exposed ports, logs, checkpoints (restore, fork), restart and delete."""

import codecs
import json
import urllib.parse
from dataclasses import dataclass

from ._wire import Record, to_wire
from .errors import RootboxError


def _q(s):
    return urllib.parse.quote(s, safe="")


@dataclass
class ExecResult:
    """How a command ended: ``exit_code`` (None when a signal ended it), ``signal``, ``stdout``,
    ``stderr``, ``truncated`` (the JSON answer kept only the first bytes; never when streamed),
    ``timed_out`` and ``ms``."""

    exit_code: object
    signal: object
    stdout: str
    stderr: str
    truncated: bool
    timed_out: bool
    ms: int


class Files:
    def __init__(self, transport, server_id):
        self._t = transport
        self._at = f"servers/{_q(server_id)}/files"

    def read(self, path):
        """A file's bytes."""
        return self._t.open("GET", self._at, query={"path": path}, headers={"accept": "*/*"}).read()

    def write(self, path, data, mode=None):
        """Writes a file whole (parent directories made); ``mode`` like "755"."""
        h = {"content-type": "application/octet-stream"}
        return Record.of(self._t.json("PUT", self._at, query={"path": path, "mode": mode}, body=data, headers=h))

    def list(self, path):
        """A directory's entries: ``path``, ``entries`` (name, type, size, mode, mtime), ``truncated``."""
        return Record.of(self._t.json("GET", self._at, query={"path": path, "list": True}))

    def remove(self, path):
        """Deletes a file, or a directory with its contents."""
        self._t.json("DELETE", self._at, query={"path": path})

    def upload(self, path, tar):
        """Unpacks a tar archive (gzipped or not, bytes) into the directory ``path``."""
        self._t.json("POST", self._at + "/archive", query={"path": path}, body=tar, headers={"content-type": "application/x-tar"})

    def download(self, path, gzip=False):
        """The directory ``path`` as a tar archive (bytes; gzipped with ``gzip=True``)."""
        q = {"path": path, "archive": True, "gzip": gzip}
        return self._t.open("GET", self._at, query=q, headers={"accept": "*/*"}).read()


class Domains:
    def __init__(self, transport, server_id):
        self._t = transport
        self._at = f"servers/{_q(server_id)}/domains"

    def add(self, domain):
        """Attaches a domain of yours; the answer lists the DNS records to create."""
        return Record.of(self._t.json("POST", self._at, json_body=to_wire("DomainRequest", domain=domain)))

    def list(self):
        return Record.of(self._t.json("GET", self._at)["domains"])

    def check(self, domain):
        return Record.of(self._t.json("POST", f"{self._at}/{_q(domain)}/check"))

    def remove(self, domain):
        self._t.json("DELETE", f"{self._at}/{_q(domain)}")


class Server:
    """A server. ``info`` is what the API last said of it (None for a handle made by id)."""

    def __init__(self, transport, server_id, info=None):
        self._t = transport
        self.id = server_id
        self.files = Files(transport, server_id)
        self.domains = Domains(transport, server_id)
        self._ssh = None
        self.info = None
        if info is not None:
            info = dict(info)
            ssh, key = info.pop("ssh", None), info.pop("ssh_private_key", None)
            for k in ("api_key", "subdomain_note", "account_note"):
                info.pop(k, None)
            self.info = Record.of(info)
            if ssh and key:
                self._ssh = (ssh, key)

    def __repr__(self):
        return f"<rootbox.Server {self.id}>"

    @property
    def subdomain(self):
        """The server's host name, ``<slug>.<domain>``."""
        return self.info.subdomain if self.info else None

    def refresh(self):
        """Reads the server again (GET /servers/{id})."""
        self.info = Record.of(self._t.json("GET", f"servers/{_q(self.id)}"))
        return self.info

    def exec(self, command, cwd=None, env=None, timeout=None, stdin=None, on_stdout=None, on_stderr=None):
        """Runs a command (a string through /bin/sh -c, a list as argv) to its end. With
        ``on_stdout``/``on_stderr`` the output is streamed to them as it comes (and kept whole)."""
        body = to_wire("ExecRequest", command=command, cwd=cwd, env=env, stdin=stdin, timeout=timeout)
        path = f"servers/{_q(self.id)}/exec"
        if on_stdout is None and on_stderr is None:
            a = self._t.json("POST", path, json_body=body)
            return ExecResult(**{k: a[k] for k in ExecResult.__dataclass_fields__})
        res = self._t.open("POST", path, json_body=body, headers={"accept": "application/x-ndjson"})
        out = {"stdout": [], "stderr": []}
        calls = {"stdout": on_stdout, "stderr": on_stderr}
        exit_line = None
        while True:
            raw = res.readline()
            if not raw:
                break
            raw = raw.strip()
            if not raw:
                continue
            o = json.loads(raw)
            if "stream" in o:
                out[o["stream"]].append(o["data"])
                if calls[o["stream"]]:
                    calls[o["stream"]](o["data"])
            elif "exit_code" in o:
                exit_line = o
            elif "error" in o:
                raise RootboxError(200, o["error"], o.get("detail", ""), body=o)
        if exit_line is None:
            raise RootboxError(200, "connection_failed", "the exec stream ended before the exit line")
        return ExecResult(
            exit_code=exit_line["exit_code"],
            signal=exit_line["signal"],
            stdout="".join(out["stdout"]),
            stderr="".join(out["stderr"]),
            truncated=False,
            timed_out=exit_line["timed_out"],
            ms=exit_line["ms"],
        )

    def url(self, path="/"):
        """The server's address: its subdomain on the scheme and port of the API's base URL."""
        if self.info is None:
            raise ValueError("url() needs the server read first (servers.get or refresh)")
        port = f":{self._t.port}" if self._t.port else ""
        return f"{self._t.scheme}://{self.info.subdomain}{port}{path if path.startswith('/') else '/' + path}"

    def expose(self, port):
        """Publishes a TCP port of the server on a public port: ``public``, ``container_port``, ``protocol``."""
        return Record.of(self._t.json("POST", "expose", json_body=to_wire("ExposeRequest", server=self.id, port=port)))

    def unexpose(self, port):
        self._t.json("DELETE", "expose", json_body=to_wire("ExposeRequest", server=self.id, port=port))

    def logs(self, tail=None):
        """run.sh's last lines, the supervisor's events and OOM kills (never wakes the server)."""
        return Record.of(self._t.json("GET", f"servers/{_q(self.id)}/logs", query={"tail": tail}))

    def restart(self):
        self.info = Record.of(self._t.json("POST", f"servers/{_q(self.id)}/restart"))
        return self.info

    def checkpoint(self, comment=None):
        """Checkpoints the server now: a point-in-time copy of its disk and settings (memory is not
        kept). Answers ``id``, ``server_id``, ``created_at``, ``size_bytes``, ``kind``, ``comment``."""
        body = to_wire("CheckpointRequest", comment=comment)
        return Record.of(self._t.json("POST", f"servers/{_q(self.id)}/checkpoints", json_body=body))

    def checkpoints(self):
        """The server's checkpoints, newest first (manual and automatic ones)."""
        return Record.of(self._t.json("GET", f"servers/{_q(self.id)}/checkpoints")["checkpoints"])

    def delete_checkpoint(self, checkpoint):
        self._t.json("DELETE", f"servers/{_q(self.id)}/checkpoints/{_q(checkpoint)}")

    def restore(self, checkpoint):
        """Makes the server's disk that of one of its checkpoints (it restarts; files written since
        are lost). Answers the checkpoint restored."""
        body = to_wire("RestoreRequest", checkpoint=checkpoint)
        return Record.of(self._t.json("POST", f"servers/{_q(self.id)}/restore", json_body=body)["checkpoint"])

    def fork(self, checkpoint=None, slug=None):
        """A new server of the account from a checkpoint of this one (default: one taken now), with
        its own id, subdomain and SSH key pair (as create() gives them); the two are independent."""
        body = to_wire("ForkRequest", checkpoint=checkpoint, slug=slug)
        created = self._t.json("POST", f"servers/{_q(self.id)}/fork", json_body=body)
        return Server(self._t, created["id"], created)

    def delete(self):
        """Deletes the server and everything it held."""
        self._t.json("DELETE", f"servers/{_q(self.id)}")

    def ssh_command(self):
        """The ``ssh`` command line create() answered (the key goes to ~/.ssh/<id>)."""
        if self._ssh is None:
            raise ValueError("the SSH command and key are given only by create(): this server was not created by this client")
        return self._ssh[0]

    @property
    def ssh_private_key(self):
        """The server's SSH private key (OpenSSH PEM), given only by create()."""
        return self._ssh[1] if self._ssh else None
