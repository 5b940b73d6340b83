"""Builds the `hotswap._C` extension with the project's own CMake (hotswap's libraries linked in
statically, so the wheel needs nothing of this checkout) and packages it with the pure-Python
half from trainer_sdk/python/hotswap. See pyproject.toml for the command."""

import glob
import os
import shlex
import shutil
import subprocess
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = os.path.dirname(os.path.abspath(__file__))


class CMakeBuild(build_ext):
    def build_extension(self, ext):
        # A folder beside the checkout's build/, as deep: ccache rewrites paths in the checkout
        # relative to the build folder, so a source compiled here with the flags of another
        # build of this checkout is a cache hit (the wheel test builds with the suite's).
        build = os.path.join(ROOT, "build-wheel")
        # The trainer's package runs no model on a GPU: no FlashInfer kernels to compile.
        args = ["-DCMAKE_BUILD_TYPE=Release", "-DBUILD_SHARED_LIBS=OFF",
                "-DHOTSWAP_BUILD_TESTS=OFF", "-DHOTSWAP_BUILD_BENCH=OFF",
                "-DHOTSWAP_WITH_KERNELS=OFF"]
        # More CMake arguments, after these (later ones win): the wheel test passes the suite's
        # build type and flags.
        args += shlex.split(os.environ.get("HOTSWAP_WHEEL_CMAKE_ARGS", ""))
        # The torch of this interpreter: the extension loads only into the torch it was built
        # against (`import hotswap` checks, by _build_info.py's TORCH_VERSION).
        if subprocess.run([sys.executable, "-c", "import torch"]).returncode != 0:
            raise RuntimeError(f"{sys.executable} cannot import torch; install hotswap into an "
                               "environment with PyTorch 2 (pip install --no-build-isolation .)")
        args.append(f"-DHOTSWAP_TORCH_PYTHON={sys.executable}")
        # Ninja for a fresh build folder where it is installed (scripts/cmake-generator.sh).
        generator = os.path.join(ROOT, "scripts", "cmake-generator.sh")
        if os.path.exists(generator):
            args += subprocess.run(["bash", generator, build], capture_output=True,
                                   text=True).stdout.split()
        subprocess.run(["cmake", "-S", ROOT, "-B", build, *args], check=True)
        jobs = os.environ.get("HOTSWAP_JOBS", "2")
        subprocess.run(["cmake", "--build", build, "--target", "hotswap_python", "-j", jobs],
                       check=True)
        built = glob.glob(os.path.join(build, "python", "hotswap", "_C*.so"))
        if not built:
            raise RuntimeError("CMake built no hotswap._C; its configure output says why "
                               "(look for 'hotswap: Python package OFF')")
        target = self.get_ext_fullpath(ext.name)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        shutil.copyfile(built[0], target)
        shutil.copyfile(os.path.join(build, "python", "hotswap", "_build_info.py"),
                        os.path.join(os.path.dirname(target), "_build_info.py"))


setup(
    packages=["hotswap", "hotswap.ray"],
    package_dir={"hotswap": "trainer_sdk/python/hotswap"},
    ext_modules=[Extension("hotswap._C", sources=[])],
    cmdclass={"build_ext": CMakeBuild},
    # Out of the way of a CMake build in build/ (covered by .gitignore's /build*/).
    options={"build": {"build_base": "build-pip"}},
)
