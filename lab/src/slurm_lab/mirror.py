"""A newer Slurm for the lab's machines: a partial Debian forky mirror served on the lab network.

Lab machines reach each other and nothing else (`slurm_lab.network`), so an upgrade to a newer
Slurm major comes from a mirror inside the lab, as on a cluster with a local apt mirror. The
mirror holds the real Debian packages: forky's Slurm (26.05 today) and the few libraries of
forky that trixie's are too old for (libhwloc15 2.15, libllhttp9.4, ...), exactly the set
`apt-get install -t forky <Slurm packages>` downloads on a trixie machine. They are
downloaded once, on the host's network, by apt in a one-command container of the trixie base
(the host's Debian archive, `rootfs.debian_mirror`, checked against Debian's keyring), and
cached in `<lab cache>/mirror-forky-<key>` as a Debian archive tree (`dists/forky/main`,
`pool/main`) with an unsigned Release file (the machines name it `[trusted=yes]`).

`serve` gives the lab bridge the address `MIRROR_ADDRESS` (in the lab's own network namespace)
and runs Python's HTTP file server there, in that namespace only; `Lab.down` stops it with the
rest of the lab. A machine then names the mirror as any apt source:

    deb [trusted=yes] http://10.151.0.1/debian forky main

It holds only what the upgrade needs, so apt takes its newer versions without a pin. On a real
cluster that names a full forky mirror, a pin keeps the rest of the machine on trixie
(`PIN_EXAMPLE`; lab/README.md).
"""

from __future__ import annotations

import hashlib
import logging
import os
import subprocess
import sys
import time
from email.utils import formatdate
from pathlib import Path

from slurm_lab import builder, network, programs, rootfs
from slurm_lab.errors import LabError
from slurm_lab.proc import run

logger = logging.getLogger(__name__)

#: Bump when the mirror's recipe (`_DOWNLOAD`, the index layout) changes.
MIRROR_VERSION = 1
SUITE = "forky"
FROM_SUITE = "trixie"
COMPONENT = "main"
ARCH = "amd64"
#: Every Slurm package a charm installs (`hpc_libs.slurm.*.packages`) and the ones they pull.
SLURM_PACKAGES = (
    "slurmctld",
    "slurmd",
    "slurmdbd",
    "sackd",
    "slurmrestd",
    "slurm-client",
    "slurm-wlm-basic-plugins",
    "slurm-wlm-jwt-plugin",
    "slurm-wlm-mysql-plugin",
)
#: The lab bridge's own address (machines start at .2): the mirror listens there only.
MIRROR_ADDRESS = "10.151.0.1"
MIRROR_PORT = 80
SERVE_TIMEOUT = 10.0
#: The pin for a full forky mirror: Slurm and the libraries it needs newer, nothing else.
PIN_EXAMPLE = """\
Package: *
Pin: release n=forky
Pin-Priority: 100

Package: slurm* sackd slurmctld slurmd slurmdbd slurmrestd libhwloc* libllhttp*
Pin: release n=forky
Pin-Priority: 990
"""

#: In a trixie container on the host's network: which forky packages the upgrade needs
#: (`$1` the archive, then the packages; the program names SUITE and COMPONENT).
_DOWNLOAD = programs.text("mirror-download.sh")


def source_line(address: str = MIRROR_ADDRESS) -> str:
    """Return the apt source line that names the served mirror."""
    return f"deb [trusted=yes] http://{address}/debian {SUITE} {COMPONENT}"


def ensure_repository() -> Path:
    """Return the cached mirror tree (its `debian` dir is served), building it if needed."""
    key = builder.content_key(
        str(MIRROR_VERSION), rootfs.recipe_hash(FROM_SUITE), _DOWNLOAD, *SLURM_PACKAGES
    )
    return builder.cached_build(rootfs.cache_dir(), f"mirror-{SUITE}", key, _built)


def _built(scratch: Path) -> Path:
    pool = scratch / "tree/debian/pool" / COMPONENT
    pool.mkdir(parents=True)
    _download(pool, scratch / "overlay")
    _write_indexes(scratch / "tree/debian")
    return scratch / "tree"


def _download(pool: Path, scratch: Path) -> None:
    output = builder.download_debs(
        FROM_SUITE, _DOWNLOAD, SLURM_PACKAGES, pool, scratch, what=f"{SUITE}'s Slurm packages"
    )
    if not any(pool.glob("slurmd_*.deb")):
        raise LabError(f"{SUITE} offers no newer slurmd than {FROM_SUITE}:\n{output}")


def _stanza(deb: Path, root: Path) -> str:
    control = run(["dpkg-deb", "--field", str(deb)]).stdout.rstrip("\n")
    data = deb.read_bytes()
    return (
        f"{control}\nFilename: {deb.relative_to(root)}\nSize: {len(data)}\n"
        f"MD5sum: {hashlib.md5(data).hexdigest()}\nSHA256: {hashlib.sha256(data).hexdigest()}\n"
    )


def _write_indexes(root: Path) -> None:
    """Write `dists/<suite>/<component>/binary-<arch>/Packages` and an unsigned Release."""
    debs = sorted((root / "pool").rglob("*.deb"))
    packages = "\n".join(_stanza(deb, root) for deb in debs)
    index = Path("dists", SUITE, COMPONENT, f"binary-{ARCH}", "Packages")
    (root / index).parent.mkdir(parents=True)
    (root / index).write_text(packages)
    data = packages.encode()
    relative = index.relative_to(Path("dists", SUITE))
    release = (
        f"Origin: slurm-lab\nLabel: Debian {SUITE} Slurm (partial mirror)\nSuite: testing\n"
        f"Codename: {SUITE}\nDate: {formatdate(usegmt=True)}\nArchitectures: {ARCH}\n"
        f"Components: {COMPONENT}\n"
        f"MD5Sum:\n {hashlib.md5(data).hexdigest()} {len(data)} {relative}\n"
        f"SHA256:\n {hashlib.sha256(data).hexdigest()} {len(data)} {relative}\n"
    )
    (root / "dists" / SUITE / "Release").write_text(release)


def serve(lab_netns: str, log: Path) -> str:
    """Serve the mirror on the lab bridge (lab namespace only); return its apt source line.

    Idempotent: a mirror already answering is left as it is.
    """
    tree = ensure_repository()
    network.ensure_address(lab_netns, f"{MIRROR_ADDRESS}/{network.PREFIX_LEN}")
    url = f"http://{MIRROR_ADDRESS}:{MIRROR_PORT}/debian/dists/{SUITE}/Release"
    if _answers(lab_netns, url):
        return source_line()
    argv = [
        *("ip", "netns", "exec", lab_netns, sys.executable, "-m", "http.server"),
        *("--bind", MIRROR_ADDRESS, "--directory", str(tree), str(MIRROR_PORT)),
    ]
    with log.open("ab") as output:
        subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=output,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
    deadline = time.monotonic() + SERVE_TIMEOUT
    while not _answers(lab_netns, url):
        if time.monotonic() > deadline:
            raise LabError(f"the lab mirror does not answer at {url}: see {log}")
        time.sleep(0.2)
    logger.info("lab mirror of %s's Slurm at %s", SUITE, url)
    return source_line()


def _answers(lab_netns: str, url: str) -> bool:
    """Whether `url` answers from inside the lab namespace (where the server listens)."""
    probe = "import sys, urllib.request as r; r.urlopen(sys.argv[1], timeout=2).read()"
    argv = ["ip", "netns", "exec", lab_netns, sys.executable, "-c", probe, url]
    return run(argv, check=False).returncode == 0
