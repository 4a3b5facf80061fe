"""The code interpreter through the SDK: run by internal/e2e/code_test.go, which builds the
code-interpreter template first and names it in AIRLOCK_CODE_TEMPLATE (skipped without it)."""

import asyncio
import base64
import os
import unittest

import airlock

TEMPLATE = os.environ.get("AIRLOCK_CODE_TEMPLATE")


@unittest.skipUnless(TEMPLATE, "needs a code-interpreter template: run by internal/e2e/code_test.go")
class CodeTest(unittest.TestCase):
    def test_sync(self) -> None:
        with airlock.Client() as c:
            se = c.create_session(template=TEMPLATE)
            try:
                self.assertEqual(c.run_code(se.id, "y = 6\ny * 7").text, "42")
                out: list = []
                ex = c.run_code(se.id, "print('hi', y)", on_stdout=out.append)
                # The output comes in the chunks the interpreter flushed (a busy machine may cut a line):
                # what is checked is the text, whole and in order.
                self.assertEqual("".join(out), "hi 6\n")
                self.assertEqual(ex.stdout, out)
                # Line separators other than \n inside the output (str.splitlines would split at them; a
                # JSON event cut there would not parse).
                self.assertEqual("".join(c.run_code(se.id, "print('a\\x85b\\u2028c')").stdout), "a\x85b\u2028c\n")
                ex = c.run_code(se.id, "raise ValueError('no')")
                assert ex.error is not None
                self.assertEqual(ex.error.name, "ValueError")
                self.assertIn("ValueError: no", ex.error.traceback)
                ex = c.run_code(se.id, "import matplotlib.pyplot as plt\nplt.plot([1, 2])\nplt.show()")
                self.assertTrue(base64.b64decode(ex.results[0].png or "").startswith(b"\x89PNG"))
                ex = c.run_code(se.id, "import pandas as pd\npd.DataFrame({'a': [1]})")
                self.assertIn("<table", ex.results[0].html or "")
                ctx = c.create_code_context(se.id, cwd="/tmp")
                self.assertEqual(c.run_code(se.id, "import os\nos.getcwd()", context_id=ctx.id).text, "/tmp")
                self.assertIn(ctx.id, [x.id for x in c.list_code_contexts(se.id)])
                c.delete_code_context(se.id, ctx.id)
                with self.assertRaises(airlock.NotFoundError):
                    c.run_code(se.id, "1", context_id=ctx.id)
            finally:
                c.delete_session(se.id)

    def test_async(self) -> None:
        async def main() -> None:
            async with airlock.AsyncClient() as c:
                se = await c.create_session(template=TEMPLATE)
                try:
                    ex = await c.run_code(se.id, "import time\ntime.sleep(30)", timeout=1)
                    assert ex.error is not None
                    self.assertEqual(ex.error.name, "TimeoutError")
                    self.assertEqual((await c.run_code(se.id, "z = 2\nz ** 10", env={"A": "b"})).text, "1024")
                finally:
                    await c.delete_session(se.id)

        asyncio.run(main())


if __name__ == "__main__":
    unittest.main()
