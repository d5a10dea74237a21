"""The package's build backend: setuptools' own, run on a copy of this
directory in a temporary one, so that `pip install ./clients/python` writes
nothing into the checkout (setuptools leaves build/ and *.egg-info beside
the sources it builds). An editable install is built in place, as it must
point at the sources."""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from typing import Any, Dict, Iterator, List, Optional

from setuptools import build_meta as _setuptools

ConfigSettings = Optional[Dict[str, Any]]


@contextlib.contextmanager
def _in_a_copy() -> Iterator[None]:
    source = os.getcwd()
    with tempfile.TemporaryDirectory(prefix="spawnd-client-build-") as scratch:
        copy = os.path.join(scratch, "source")
        shutil.copytree(
            source,
            copy,
            ignore=shutil.ignore_patterns("build", "dist", "*.egg-info", "__pycache__", ".mypy_cache"),
        )
        os.chdir(copy)
        try:
            yield
        finally:
            os.chdir(source)


def get_requires_for_build_wheel(config_settings: ConfigSettings = None) -> List[str]:
    with _in_a_copy():
        return list(_setuptools.get_requires_for_build_wheel(config_settings))


def get_requires_for_build_sdist(config_settings: ConfigSettings = None) -> List[str]:
    with _in_a_copy():
        return list(_setuptools.get_requires_for_build_sdist(config_settings))


def prepare_metadata_for_build_wheel(metadata_directory: str, config_settings: ConfigSettings = None) -> str:
    metadata_directory = os.path.abspath(metadata_directory)
    with _in_a_copy():
        return str(_setuptools.prepare_metadata_for_build_wheel(metadata_directory, config_settings))


def build_wheel(
    wheel_directory: str, config_settings: ConfigSettings = None, metadata_directory: Optional[str] = None
) -> str:
    wheel_directory = os.path.abspath(wheel_directory)
    if metadata_directory is not None:
        metadata_directory = os.path.abspath(metadata_directory)
    with _in_a_copy():
        return str(_setuptools.build_wheel(wheel_directory, config_settings, metadata_directory))


def build_sdist(sdist_directory: str, config_settings: ConfigSettings = None) -> str:
    sdist_directory = os.path.abspath(sdist_directory)
    with _in_a_copy():
        return str(_setuptools.build_sdist(sdist_directory, config_settings))


get_requires_for_build_editable = getattr(_setuptools, "get_requires_for_build_editable", None)
prepare_metadata_for_build_editable = getattr(_setuptools, "prepare_metadata_for_build_editable", None)
build_editable = getattr(_setuptools, "build_editable", None)
