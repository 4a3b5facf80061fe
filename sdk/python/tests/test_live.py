"""The SDK against a real server: AIRLOCK_URL and AIRLOCK_API_KEY (an API key of a tenant it may
create in), run by internal/e2e/sdk_python_test.go."""

import asyncio
import os
import time
import unittest

import airlock


class SyncClient(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.c = airlock.Client()
        cls.sb = cls.c.create_sandbox(timeout_seconds=600, metadata={"suite": "python"})

    @classmethod
    def tearDownClass(cls):
        cls.c.delete_sandbox(cls.sb.id)
        cls.c.close()

    def test_exec(self):
        r = self.c.exec(self.sb.id, ["bash", "-c", "echo out; echo err >&2; exit 3"], env={"A": "1"})
        self.assertEqual((r.exit_code, r.stdout, r.stderr), (3, "out\n", "err\n"))
        r = self.c.exec(self.sb.id, ["sleep", "30"], timeout_seconds=1)
        self.assertTrue(r.timed_out)
        self.assertEqual(self.c.exec(self.sb.id, ["cat"], stdin="fed").stdout, "fed")

    def test_stream(self):
        with self.c.exec_stream(self.sb.id, ["bash", "-c", "for i in 1 2 3; do echo $i; sleep 0.1; done; echo e >&2; exit 4"]) as p:
            got = list(p)
            self.assertEqual(p.wait().exit_code, 4)
        out = b"".join(d for s, d in got if s == "stdout")
        self.assertEqual(out, b"1\n2\n3\n")
        self.assertIn(("stderr", b"e\n"), got)
        self.assertGreaterEqual(len([1 for s, _ in got if s == "stdout"]), 2, "output came as it was made")

        p = self.c.exec_stream(self.sb.id, ["cat"])
        p.send_stdin(b"through stdin\n")
        p.close_stdin()
        self.assertEqual(b"".join(d for _, d in p), b"through stdin\n")
        self.assertEqual(p.wait().exit_code, 0)
        p.close()

        p = self.c.exec_stream(self.sb.id, ["sleep", "60"])
        p.signal("KILL")
        st = p.wait()
        self.assertEqual((st.exit_code, st.signal), (-1, "SIGKILL"))
        p.close()

    def test_pty(self):
        with self.c.exec_stream(self.sb.id, ["bash", "-i"], pty=(24, 80)) as p:
            p.resize(30, 100)
            p.send_stdin("stty size; echo pty-$((6*7)); exit\n")
            out = b"".join(d for _, d in p)
            self.assertEqual(p.wait().exit_code, 0)
        self.assertIn(b"30 100", out)
        self.assertIn(b"pty-42", out)

    def test_files(self):
        self.assertEqual(self.c.mkdir(self.sb.id, "/tmp/py").type, "dir")
        fi = self.c.write_file(self.sb.id, "/tmp/py/a.txt", "hello")
        self.assertEqual(fi.size, 5)
        blob = bytes(range(256)) * 1000
        self.c.write_file(self.sb.id, "/tmp/py/b.bin", blob, mode=0o600)
        self.assertEqual(self.c.read_file(self.sb.id, "/tmp/py/b.bin"), blob)
        self.assertEqual(self.c.stat(self.sb.id, "/tmp/py/b.bin").mode, "0600")
        self.c.move(self.sb.id, "/tmp/py/a.txt", "/tmp/py/c.txt")
        self.assertEqual(sorted(f.name for f in self.c.list_files(self.sb.id, "/tmp/py")), ["b.bin", "c.txt"])
        self.c.remove(self.sb.id, "/tmp/py", recursive=True)
        with self.assertRaises(airlock.NotFoundError):
            self.c.stat(self.sb.id, "/tmp/py")

    def test_bounded_read(self):
        # As root, the sandbox makes a 64 GiB sparse file: read_file stops at its bound.
        r = self.c.exec(self.sb.id, ["truncate", "-s", "64G", "/tmp/huge"], user="root")
        self.assertEqual(r.exit_code, 0, r.stderr)
        with self.assertRaises(airlock.TooLargeError) as cm:
            self.c.read_file(self.sb.id, "/tmp/huge", max_bytes=1 << 20)
        self.assertIn("larger than 1048576 bytes", str(cm.exception))
        # Positive control: a file within the bound reads whole.
        self.c.write_file(self.sb.id, "/tmp/small", b"s" * 1000)
        self.assertEqual(self.c.read_file(self.sb.id, "/tmp/small", max_bytes=1000), b"s" * 1000)
        self.c.remove(self.sb.id, "/tmp/huge")

    def test_errors(self):
        with self.assertRaises(airlock.NotFoundError) as e:
            self.c.get_sandbox("sb_" + "a" * 26)
        self.assertEqual(e.exception.status, 404)
        with self.assertRaises(airlock.InvalidArgumentError) as e:
            self.c.create_sandbox(memory_mb=1)
        self.assertIn("memory_mb", e.exception.message)
        with airlock.Client(api_key="al_not_a_key") as bad, self.assertRaises(airlock.AuthenticationError):
            bad.list_sandboxes()

    def test_tokens_and_egress(self):
        tok = self.c.create_token(sandbox_id=self.sb.id, scopes=["exec"], ttl_seconds=600)
        self.assertTrue(tok.token)
        scoped = airlock.Client(api_key=tok.token)
        self.assertEqual(scoped.exec(self.sb.id, ["true"]).exit_code, 0)
        with self.assertRaises(airlock.AirlockError):
            scoped.list_sandboxes()
        with self.assertRaises(airlock.PermissionDeniedError):
            scoped.read_file(self.sb.id, "/etc/hostname")
        self.assertIn(tok.id, [t.id for t in self.c.list_tokens(sandbox_id=self.sb.id)])
        self.c.revoke_token(tok.id)
        with self.assertRaises(airlock.AuthenticationError):
            scoped.exec(self.sb.id, ["true"])
        scoped.close()
        # A sandbox that may reach one host only: its try elsewhere is denied, and the log says so.
        sb = self.c.create_sandbox(allow_hosts=["example.com"], timeout_seconds=120)
        try:
            self.c.exec(sb.id, ["bash", "-c", "exec 3<>/dev/tcp/203.0.113.7/443"], timeout_seconds=5)
            for _ in range(75):
                flows = self.c.egress(sb.id, decision="deny")
                if flows:
                    break
                time.sleep(0.2)
            self.assertTrue(any(f.dst_ip == "203.0.113.7" and f.decision == "deny" for f in flows), flows)
        finally:
            self.c.delete_sandbox(sb.id)


class Sessions(unittest.TestCase):
    def test_session_life(self):
        with airlock.Client() as c:
            se = c.create_session(metadata={"suite": "python"}, idle_timeout_seconds=0)
            try:
                self.assertEqual(se.state, "running")
                c.exec(se.id, ["bash", "-c", "nohup bash -c 'n=0; while true; do n=$((n+1)); echo $n > /tmp/c.new; mv /tmp/c.new /tmp/count; sleep 0.1; done' >/dev/null 2>&1 &"])
                c.write_file(se.id, "/home/user/note.txt", "v1")
                first = c.snapshot_session(se.id, name="v1")
                c.write_file(se.id, "/home/user/note.txt", "v2")
                second = c.snapshot_session(se.id)
                d = c.diff(se.id, first.id, second.id, path="/home/user/note.txt")
                self.assertIn("-v1", d.unified)
                self.assertIn("+v2", d.unified)
                self.assertEqual(c.pause_session(se.id).state, "paused")
                self.assertEqual(c.resume_session(se.id).state, "running")
                a = int(c.read_file(se.id, "/tmp/count"))
                time.sleep(0.5)
                b = int(c.read_file(se.id, "/tmp/count"))
                self.assertGreater(b, a, "the process went on after the resume")
                tl = c.timeline(se.id)
                self.assertIn(first.id, [s.id for s in tl.snapshots])
                c.restore_session(se.id, snapshot_id=first.id)
                self.assertEqual(c.read_file(se.id, "/home/user/note.txt"), b"v1")
                forks = c.fork_session(se.id, 2)
                self.assertEqual(len(forks), 2)
                for f in forks:
                    self.assertEqual(c.read_file(f.id, "/home/user/note.txt"), b"v1")
                    c.delete_session(f.id)
                ends = c.set_session_timeout(se.id, 3600)
                self.assertIsNotNone(ends.ends_at)
                self.assertIn(se.id, [s.id for s in c.list_sessions(metadata={"suite": "python"})])
            finally:
                c.delete_session(se.id)


class Async(unittest.IsolatedAsyncioTestCase):
    async def test_async(self):
        async with airlock.AsyncClient() as c:
            sb = await c.create_sandbox(timeout_seconds=300)
            try:
                r, _ = await asyncio.gather(c.exec(sb.id, ["echo", "one"]), c.write_file(sb.id, "/tmp/x", b"two"))
                self.assertEqual(r.stdout, "one\n")
                self.assertEqual(await c.read_file(sb.id, "/tmp/x"), b"two")
                await c.exec(sb.id, ["truncate", "-s", "64G", "/tmp/huge"], user="root")
                with self.assertRaises(airlock.TooLargeError):
                    await c.read_file(sb.id, "/tmp/huge", max_bytes=1 << 20)
                async with await c.exec_stream(sb.id, ["bash", "-c", "echo a; sleep 0.2; echo b"]) as p:
                    chunks = [d async for _, d in p]
                    self.assertEqual((await p.wait()).exit_code, 0)
                self.assertEqual(b"".join(chunks), b"a\nb\n")
                with self.assertRaises(airlock.NotFoundError):
                    await c.get_session("se_" + "a" * 26)
            finally:
                await c.delete_sandbox(sb.id)


if __name__ == "__main__":
    unittest.main()
