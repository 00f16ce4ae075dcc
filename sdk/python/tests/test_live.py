"""The Python SDK against a real rootbox daemon, run by test/sdk/python.test.ts of the rootbox
repository (which starts the daemon with runc servers and sets ROOTBOX_BASE_URL):

  Flow       anonymous create (the key kept) -> exec (exit code, streamed output, timeout,
             stdin, cwd, env) -> a 20 MB binary file byte-exact, listing, tar download and
             upload -> the page at url() -> expose, logs, restart -> a wrong key and a missing
             server as typed errors -> checkpoint, change, restore (the file back), fork (an
             independent server with its own key pair), delete_checkpoint. Writes the account's key and the server id to
             $ROOTBOX_TEST_STATE.
  Exhausted  (after the driver used up the account's grant) a 402 is a PaymentRequiredError
             with the recharge URL, and delete still works.
"""

import hashlib
import json
import os
import time
import unittest
import urllib.request

import rootbox

BASE = os.environ["ROOTBOX_BASE_URL"]
STATE = os.environ["ROOTBOX_TEST_STATE"]


def sha(b):
    return hashlib.sha256(b).hexdigest()


class Flow(unittest.TestCase):
    client = None
    server = None

    @classmethod
    def setUpClass(cls):
        cls.client = rootbox.Rootbox(base_url=BASE)

    @classmethod
    def tearDownClass(cls):
        cls.client.close()

    def test_1_anonymous_create_keeps_the_key(self):
        c = self.client
        self.assertIsNone(c.api_key)
        s = c.create(slug="sdk-py")
        type(self).server = s
        self.assertRegex(s.id, r"^srv_")
        self.assertRegex(c.api_key, r"^rbx_")
        self.assertEqual(s.subdomain, "sdk-py.localhost")
        self.assertEqual(s.info.state, "running")
        self.assertEqual(s.info.credits.tier, "anonymous")
        self.assertRegex(s.ssh_command(), r"^ssh -i ~/\.ssh/srv_\w+ root@\S+ -p \d+$")
        self.assertTrue(s.ssh_private_key.startswith("-----BEGIN OPENSSH PRIVATE KEY-----"))
        self.assertEqual([x.id for x in c.servers.list()], [s.id])
        self.assertEqual(c.servers.get(s.id).info.subdomain, "sdk-py.localhost")
        self.assertEqual(c.server(s.id).refresh().id, s.id)
        with open(STATE, "w") as f:
            json.dump({"api_key": c.api_key, "id": s.id}, f)

    def test_2_exec(self):
        s = self.server
        r = s.exec("echo out; echo err >&2; exit 3")
        self.assertEqual((r.exit_code, r.signal, r.stdout, r.stderr, r.truncated, r.timed_out), (3, None, "out\n", "err\n", False, False))
        self.assertEqual(s.exec('pwd; echo "$FOO"', cwd="/tmp", env={"FOO": "bar baz"}).stdout, "/tmp\nbar baz\n")
        self.assertEqual(s.exec(["printf", "%s|", "a b", "c"]).stdout, "a b|c|")
        self.assertEqual(s.exec("tr a-z A-Z", stdin="hello stdin").stdout, "HELLO STDIN")

    def test_3_exec_streams_output_as_it_comes(self):
        seen, errs = [], []
        r = self.server.exec(
            'read x; echo "got $x"; sleep 1.5; echo late; echo oops >&2',
            stdin="in\n",
            on_stdout=lambda d: seen.append((d, time.monotonic())),
            on_stderr=errs.append,
        )
        ended = time.monotonic()
        self.assertEqual(r.exit_code, 0)
        self.assertEqual(r.stdout, "got in\nlate\n")
        self.assertEqual(r.stderr, "oops\n")
        self.assertEqual("".join(d for d, _ in seen), r.stdout)
        self.assertEqual("".join(errs), "oops\n")
        self.assertTrue(seen[0][0].startswith("got in"), seen)
        self.assertGreaterEqual(ended - seen[0][1], 1.0, "the first line came before the command slept")

    def test_4_exec_timeout(self):
        t0 = time.monotonic()
        r = self.server.exec("echo start; sleep 30", timeout=1)
        self.assertLess(time.monotonic() - t0, 15)
        self.assertTrue(r.timed_out)
        self.assertEqual(r.stdout, "start\n")
        self.assertNotEqual(r.exit_code, 0)
        s = self.server.exec("echo start; sleep 30", timeout=1, on_stdout=lambda d: None)
        self.assertTrue(s.timed_out)
        self.assertEqual(s.stdout, "start\n")

    def test_5_files(self):
        f = self.server.files
        data = os.urandom(20 * 1024 * 1024)
        w = f.write("/root/data/blob.bin", data, mode="600")
        self.assertEqual(w, {"path": "/root/data/blob.bin", "size": len(data)})
        back = f.read("/root/data/blob.bin")
        self.assertIsInstance(back, bytes)
        self.assertEqual(len(back), len(data))
        self.assertEqual(sha(back), sha(data))
        self.assertEqual(self.server.exec("sha256sum /root/data/blob.bin").stdout.split(" ")[0], sha(data))
        f.write("/root/data/note.txt", "a note\n")
        listing = f.list("/root/data")
        by_name = {e.name: e for e in listing.entries}
        self.assertEqual(by_name["blob.bin"].size, len(data))
        self.assertEqual(by_name["blob.bin"].mode, "600")
        self.assertEqual(by_name["note.txt"].type, "file")
        self.assertFalse(listing.truncated)
        tgz = f.download("/root/data", gzip=True)
        self.assertEqual(tgz[:2], b"\x1f\x8b")
        f.upload("/root/copy", tgz)
        self.assertEqual(sha(f.read("/root/copy/blob.bin")), sha(data))
        self.assertEqual(f.read("/root/copy/note.txt"), b"a note\n")
        f.remove("/root/copy")
        with self.assertRaises(rootbox.RootboxError) as e:
            f.read("/root/copy/note.txt")
        self.assertEqual((e.exception.status, e.exception.code), (404, "file_not_found"))

    def test_6_url_is_the_servers_page(self):
        self.server.files.write("/root/www/index.html", "<h1>from python</h1>\n")
        url = self.server.url("/")
        self.assertEqual(url, BASE.replace("api.localhost", "sdk-py.localhost").rstrip("/") + "/")
        with urllib.request.urlopen(url) as r:
            self.assertEqual(r.status, 200)
            self.assertEqual(r.read(), b"<h1>from python</h1>\n")

    def test_7_expose_logs_restart_credits(self):
        s = self.server
        p = s.expose(8000)
        self.assertEqual((p.container_port, p.protocol), (8000, "tcp"))
        self.assertRegex(p.public, r":\d+$")
        self.assertEqual(s.refresh().exposed_ports, [p])
        s.unexpose(8000)
        self.assertEqual(s.refresh().exposed_ports, [])
        logs = s.logs(tail=10)
        self.assertIsInstance(logs.lines, list)
        self.assertIsInstance(logs.oom_kills, int)
        self.assertEqual(s.restart().state, "running")
        self.assertEqual(s.exec("echo back").stdout, "back\n")
        self.assertEqual(self.client.credits().tier, "anonymous")

    def test_8_typed_errors(self):
        wrong = rootbox.Rootbox(api_key="rbx_" + "0" * 40, base_url=BASE)
        with self.assertRaises(rootbox.RootboxError) as e:
            wrong.servers.list()
        self.assertEqual(e.exception.status, 401)
        self.assertIn(e.exception.code, ("invalid_api_key", "missing_api_key"))
        self.assertTrue(e.exception.detail)
        with self.assertRaises(rootbox.RootboxError) as e:
            self.client.servers.get("srv_0000000000000000")
        self.assertEqual((e.exception.status, e.exception.code), (404, "server_not_found"))

    def test_8a_checkpoint_restore_fork(self):
        s = self.server
        s.files.write("/root/ck.txt", b"before\n")
        cp = s.checkpoint(comment="sdk py")
        self.assertRegex(cp.id, r"^ckp_")
        self.assertEqual((cp.server_id, cp.kind, cp.comment), (s.id, "manual", "sdk py"))
        self.assertGreater(cp.size_bytes, 0)
        s.files.write("/root/ck.txt", b"after\n")
        s.files.write("/root/new.txt", b"made after\n")
        self.assertEqual(s.restore(cp.id).id, cp.id)
        self.assertEqual(s.files.read("/root/ck.txt"), b"before\n")
        self.assertEqual(s.exec("test -e /root/new.txt").exit_code, 1)
        cp2 = s.checkpoint()
        self.assertNotIn("comment", cp2)
        self.assertEqual([c.id for c in s.checkpoints()], [cp2.id, cp.id])
        # fork: a new server from the first checkpoint, with its own id, subdomain and SSH key
        f = s.fork(checkpoint=cp.id, slug="sdk-py-fork")
        try:
            self.assertRegex(f.id, r"^srv_")
            self.assertNotEqual(f.id, s.id)
            self.assertEqual(f.subdomain, "sdk-py-fork.localhost")
            self.assertTrue(f.ssh_command().startswith(f"ssh -i ~/.ssh/{f.id} "))
            self.assertTrue(f.ssh_private_key.startswith("-----BEGIN OPENSSH PRIVATE KEY-----"))
            self.assertNotEqual(f.ssh_private_key, s.ssh_private_key)
            self.assertEqual(f.files.read("/root/ck.txt"), b"before\n")
            # independent both ways
            f.files.write("/root/ck.txt", b"fork\n")
            s.files.write("/root/ck.txt", b"source\n")
            self.assertEqual(f.files.read("/root/ck.txt"), b"fork\n")
            self.assertEqual(s.files.read("/root/ck.txt"), b"source\n")
            self.assertEqual(f.checkpoints(), [])
        finally:
            f.delete()
        s.delete_checkpoint(cp2.id)
        self.assertEqual([c.id for c in s.checkpoints()], [cp.id])
        with self.assertRaises(rootbox.RootboxError) as e:
            s.restore(cp2.id)
        self.assertEqual((e.exception.status, e.exception.code), (404, "checkpoint_not_found"))

    def test_9_rotate_key(self):
        c = self.client
        old = c.api_key
        k = c.rotate_key()
        self.assertRegex(k.api_key, r"^rbx_")
        self.assertEqual(k.tier, "anonymous")
        self.assertEqual(c.api_key, k.api_key)
        self.assertEqual(len(c.servers.list()), 1)
        with self.assertRaises(rootbox.RootboxError) as e:
            rootbox.Rootbox(api_key=old, base_url=BASE).servers.list()
        self.assertEqual((e.exception.status, e.exception.code), (401, "revoked_api_key"))
        with open(STATE, "w") as f:
            json.dump({"api_key": c.api_key, "id": self.server.id}, f)


class Exhausted(unittest.TestCase):
    def test_402_is_typed_with_the_recharge_url_and_delete_works(self):
        with open(STATE) as f:
            st = json.load(f)
        c = rootbox.Rootbox(api_key=st["api_key"], base_url=BASE)
        s = c.server(st["id"])
        with self.assertRaises(rootbox.PaymentRequiredError) as e:
            s.exec("true")
        self.assertIsInstance(e.exception, rootbox.RootboxError)
        self.assertEqual((e.exception.status, e.exception.code), (402, "free_tier_exceeded"))
        self.assertEqual(e.exception.recharge_url, BASE.rstrip("/") + "/account/recharge")
        s.delete()
        with self.assertRaises(rootbox.RootboxError) as e:
            c.servers.get(st["id"])
        self.assertEqual(e.exception.code, "server_not_found")
        c.close()


if __name__ == "__main__":
    unittest.main()
