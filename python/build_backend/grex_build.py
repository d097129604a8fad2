# SPDX-License-Identifier: Apache-2.0
"""The PEP 517 build backend behind `pip install .`.

It needs nothing from a package index: pyproject.toml names it as an in-tree
backend with no build requirements. It configures the project with Meson,
builds it, installs it into a staging directory, and packs a wheel from
there:
  grex/                  the ctypes package, with libgrex.so.0 beside it
  grex_torch/            the torch.distributed backend, where torch was found
  grex-X.data/scripts/   grex-run, grex-perf, grex-info, grex-store
Meson and Ninja must be installed (Debian: meson, ninja-build), as for any
grex build.

Options (pip --config-settings KEY=VALUE, or the environment):
  setup-args   extra `meson setup` arguments, split on spaces (GREX_WHEEL_SETUP_ARGS),
               e.g. -Ddpdk=disabled
  builddir     a Meson build directory to use and keep (GREX_WHEEL_BUILDDIR);
               default: a temporary one
"""
import base64
import hashlib
import io
import os
import re
import shutil
import stat
import subprocess
import sys
import sysconfig
import tarfile
import tempfile
import zipfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
NAME = "grex"
SCRIPTS = ("grex-run", "grex-perf", "grex-info", "grex-store")


def _version():
    with open(os.path.join(ROOT, "meson.build"), encoding="utf-8") as f:
        m = re.search(r"version:\s*'([^']+)'", f.read())
    if m is None:
        raise RuntimeError("grex_build: no version in meson.build")
    return m.group(1)


def _tag():
    impl = f"cp{sys.version_info.major}{sys.version_info.minor}"
    abi = impl + getattr(sys, "abiflags", "")
    plat = sysconfig.get_platform().replace("-", "_").replace(".", "_")
    return f"{impl}-{abi}-{plat}"


def _metadata():
    return (f"Metadata-Version: 2.1\nName: {NAME}\nVersion: {_version()}\n"
            "Summary: Kernel-bypass transport and collectives for distributed training "
            "(ctypes package and torch.distributed backend)\n"
            "License: Apache-2.0\nRequires-Python: >=3.9\n")


def _dist_info():
    return f"{NAME}-{_version()}.dist-info"


def _wheel_file():
    return f"Wheel-Version: 1.0\nGenerator: grex_build\nRoot-Is-Purelib: false\nTag: {_tag()}\n"


def _setting(config_settings, key, env):
    v = (config_settings or {}).get(key)
    if isinstance(v, list):
        v = " ".join(v)
    return v if v else os.environ.get(env, "")


def _run(cmd, cwd=None):
    # pip's isolated build environment hides the interpreter's site-packages
    # (PYTHONPATH with its own sitecustomize, PYTHONNOUSERSITE). Meson asks
    # this interpreter about torch in a child process: give that child the
    # interpreter's real view, so it finds the torch the user installed.
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONNOUSERSITE", "PYTHONHOME")}
    print("grex_build: " + " ".join(cmd), file=sys.stderr, flush=True)
    subprocess.run(cmd, cwd=cwd, env=env, check=True, stdout=sys.stderr)


def _build(config_settings):
    """Builds and stages the project; returns (staging root, build directory, temporary dirs)."""
    for tool in ("meson", "ninja"):
        if shutil.which(tool) is None:
            raise RuntimeError(f"grex_build: {tool} not found (apt-get install meson ninja-build)")
    temps = []
    builddir = _setting(config_settings, "builddir", "GREX_WHEEL_BUILDDIR")
    if not builddir:
        builddir = tempfile.mkdtemp(prefix="grex-wheel-build-")
        temps.append(builddir)
    builddir = os.path.abspath(builddir)
    if not os.path.exists(os.path.join(builddir, "build.ninja")):
        args = ["meson", "setup", builddir, ROOT, "--buildtype=release", "--prefix=/grex",
                "-Dtests=disabled", "-Dbenchmarks=disabled", f"-Dtorch_python={sys.executable}"]
        args += _setting(config_settings, "setup-args", "GREX_WHEEL_SETUP_ARGS").split()
        _run(args)
    _run(["meson", "compile", "-C", builddir])
    stage = tempfile.mkdtemp(prefix="grex-wheel-stage-")
    temps.append(stage)
    _run(["meson", "install", "-C", builddir, "--destdir", stage, "--quiet"])
    return stage, temps


def _find(root, pred):
    for d, _, files in os.walk(root):
        for f in sorted(files):
            if pred(d, f):
                return os.path.join(d, f)
    return None


def _collect(stage):
    """(path in wheel, file on disk, executable) for everything the wheel carries."""
    out = []
    grex_init = _find(stage, lambda d, f: f == "__init__.py" and os.path.basename(d) == "grex")
    lib = _find(stage, lambda d, f: re.fullmatch(r"libgrex\.so\.\d+\.\d+\.\d+", f) is not None)
    if grex_init is None or lib is None:
        raise RuntimeError("grex_build: the staged install lacks the grex package or libgrex")
    out.append(("grex/__init__.py", grex_init, False))
    out.append(("grex/libgrex.so.0", lib, True))  # grex/__init__.py loads it from beside itself
    ext = _find(stage, lambda d, f: f.startswith("_grex_torch") and f.endswith(".so"))
    if ext is not None:
        pkg = os.path.dirname(ext)
        out.append(("grex_torch/__init__.py", os.path.join(pkg, "__init__.py"), False))
        out.append((f"grex_torch/{os.path.basename(ext)}", ext, True))
    else:
        print("grex_build: no torch found by this interpreter: the wheel holds grex without grex_torch",
              file=sys.stderr)
    for s in SCRIPTS:
        p = _find(stage, lambda d, f, s=s: f == s and os.path.basename(d) == "bin")
        if p is not None:
            out.append((f"{NAME}-{_version()}.data/scripts/{s}", p, True))
    return out


def _record_line(path, data):
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{path},sha256={digest},{len(data)}"


# ---------------------------------------------------------------- PEP 517 hooks

def get_requires_for_build_wheel(config_settings=None):
    return []


def get_requires_for_build_sdist(config_settings=None):
    return []


def prepare_metadata_for_build_wheel(metadata_directory, config_settings=None):
    d = os.path.join(metadata_directory, _dist_info())
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "METADATA"), "w", encoding="utf-8") as f:
        f.write(_metadata())
    with open(os.path.join(d, "WHEEL"), "w", encoding="utf-8") as f:
        f.write(_wheel_file())
    return _dist_info()


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    stage, temps = _build(config_settings)
    try:
        name = f"{NAME}-{_version()}-{_tag()}.whl"
        record = []
        with zipfile.ZipFile(os.path.join(wheel_directory, name), "w", zipfile.ZIP_DEFLATED) as z:
            def add(path, data, executable):
                info = zipfile.ZipInfo(path, date_time=(2020, 1, 1, 0, 0, 0))
                # pip keeps the executable bit only on regular-file modes (S_IFREG set).
                info.external_attr = (stat.S_IFREG | (0o755 if executable else 0o644)) << 16
                info.compress_type = zipfile.ZIP_DEFLATED
                z.writestr(info, data)
                record.append(_record_line(path, data))
            for path, src, executable in _collect(stage):
                with open(src, "rb") as f:
                    add(path, f.read(), executable)
            di = _dist_info()
            add(f"{di}/METADATA", _metadata().encode(), False)
            add(f"{di}/WHEEL", _wheel_file().encode(), False)
            add(f"{di}/top_level.txt", b"grex\ngrex_torch\n", False)
            record.append(f"{di}/RECORD,,")
            info = zipfile.ZipInfo(f"{di}/RECORD", date_time=(2020, 1, 1, 0, 0, 0))
            info.external_attr = (stat.S_IFREG | 0o644) << 16
            z.writestr(info, "\n".join(record) + "\n")
        return name
    finally:
        for t in temps:
            shutil.rmtree(t, ignore_errors=True)


def build_sdist(sdist_directory, config_settings=None):
    """The tracked sources (git ls-files) under grex-X/, with PKG-INFO."""
    base = f"{NAME}-{_version()}"
    try:
        files = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, check=True, capture_output=True).stdout
        files = [f for f in files.decode().split("\0") if f]
    except (OSError, subprocess.CalledProcessError):
        raise RuntimeError("grex_build: an sdist is made from a git checkout (git ls-files)") from None
    name = f"{base}.tar.gz"
    with tarfile.open(os.path.join(sdist_directory, name), "w:gz", format=tarfile.PAX_FORMAT) as t:
        for f in files:
            t.add(os.path.join(ROOT, f), arcname=f"{base}/{f}", recursive=False)
        data = _metadata().encode()
        info = tarfile.TarInfo(f"{base}/PKG-INFO")
        info.size = len(data)
        t.addfile(info, io.BytesIO(data))
    return name
