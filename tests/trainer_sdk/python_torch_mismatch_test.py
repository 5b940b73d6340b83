"""`import hotswap` under a torch other than the one its extension was built against fails with an
ImportError naming both versions, and the interpreter lives on (loading the extension itself
would abort it: `terminate called after throwing ... std::system_error`, seen with an extension
for torch 1.13 under torch 2.14).

The other torch is a module named `torch` whose version is another one, first on the path: what
is checked is that nothing of the extension is loaded before the version is compared.

Usage: python_torch_mismatch_test.py  (PYTHONPATH holds the built package)
"""

import os
import subprocess
import sys
import tempfile

import hotswap._build_info as build_info
import torch

assert torch.__version__ == build_info.TORCH_VERSION, (torch.__version__, build_info.TORCH_VERSION)

with tempfile.TemporaryDirectory(prefix="hotswap-other-torch-") as tmp:
    os.makedirs(os.path.join(tmp, "torch"))
    with open(os.path.join(tmp, "torch", "__init__.py"), "w") as f:
        f.write('__version__ = "1.13.1"\n')
    env = dict(os.environ, PYTHONPATH=tmp + os.pathsep + os.environ.get("PYTHONPATH", ""))
    probe = ("import sys\n"
             "try:\n"
             "    import hotswap\n"
             "except ImportError as e:\n"
             "    print('ImportError:', e)\n"
             "    sys.exit(3)\n"
             "print('imported')\n")
    r = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True,
                       timeout=120)
    out = r.stdout + r.stderr
    assert r.returncode == 3, f"exit {r.returncode} (a negative one is a signal): {out}"
    assert "1.13.1" in out and build_info.TORCH_VERSION in out, out
    assert "built against torch" in out, out
    print("refused:", out.strip())

# The right torch still imports the whole package.
import hotswap  # noqa: E402

assert hotswap.HAVE_TRAINER_SDK, "the trainer SDK did not import under the torch it was built for"
print("ok: the torch it was built for imports; another is refused by name")
