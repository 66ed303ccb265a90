"""Ship conf/ inside the package (as trinity/conf) so a non-editable install composes its configs too.

Everything else about the build is in pyproject.toml; this only extends build_py.
"""

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py


class BuildPyWithConf(build_py):
    def run(self):
        super().run()
        source = Path(__file__).resolve().parent / "conf"
        if source.is_dir():
            shutil.copytree(source, Path(self.build_lib) / "trinity" / "conf", dirs_exist_ok=True)


setup(cmdclass={"build_py": BuildPyWithConf})
