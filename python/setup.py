"""Builds gradsync._C with the project's own CMake (python/CMakeLists.txt, target
gradsync_python) for pip; everything else is in pyproject.toml.

GRADSYNC_BUILD_DIR: the CMake build directory to use (default: build-python at the repository's
root, configured here on first use: Release, LibTorch and Python on, no tests, benchmarks or MPI;
an existing build directory, e.g. build/, is reused as it is). GRADSYNC_JOBS: parallel jobs.
"""

import os
import shutil
import subprocess
import sys
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

REPO = Path(__file__).resolve().parent.parent


class CMakeBuild(build_ext):
    def build_extension(self, ext):
        build = Path(os.environ.get("GRADSYNC_BUILD_DIR", REPO / "build-python")).resolve()
        if not (build / "CMakeCache.txt").exists():
            subprocess.run(["cmake", "-S", str(REPO), "-B", str(build), "-G", "Ninja",
                            "-DCMAKE_BUILD_TYPE=Release", "-DGRADSYNC_WITH_TORCH=ON",
                            "-DGRADSYNC_WITH_PYTHON=ON", "-DGRADSYNC_BUILD_TESTS=OFF",
                            "-DGRADSYNC_BUILD_BENCHMARKS=OFF", "-DGRADSYNC_WITH_MPI=OFF",
                            f"-DPython3_EXECUTABLE={sys.executable}"], check=True)
        jobs = os.environ.get("GRADSYNC_JOBS", str(os.cpu_count() or 2))
        subprocess.run(["cmake", "--build", str(build), "--target", "gradsync_python", "-j", jobs],
                       check=True)
        built = next((build / "python" / "gradsync").glob("_C.*.so"))
        target = Path(self.get_ext_fullpath(ext.name))
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(built, target)


setup(ext_modules=[Extension("gradsync._C", sources=[])], cmdclass={"build_ext": CMakeBuild})
