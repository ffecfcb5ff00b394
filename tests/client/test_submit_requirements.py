"""``stormpy submit -r/--wheels`` input checks: one line and exit 1 before anything is uploaded
(no cluster needed: they fail before Nimbus is contacted), and what goes into the code archive."""
from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

from stormpy.client.submit import build_code_archive, requirement_files
from stormpy.testing import free_port
from stormpy.testing.wheels import build_wheel

REPO = Path(__file__).resolve().parents[2]
WORDCOUNT = REPO / "examples" / "wordcount.py"


def submit(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "stormpy.cli", "submit", str(WORDCOUNT), *args,
                           "-c", f"nimbus.thrift.port={free_port()}"],
                          capture_output=True, text=True, timeout=60, cwd=str(cwd))


def error_line(proc: subprocess.CompletedProcess[str]) -> str:
    lines = [line for line in proc.stderr.splitlines() if line.startswith("stormpy")]
    assert proc.returncode == 1 and len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    return lines[0]


def test_bad_requirements_input_is_one_line(tmp_path: Path) -> None:
    assert error_line(submit("-r", str(tmp_path / "nope.txt"), cwd=tmp_path)) == \
        f"stormpy: error: requirements file {tmp_path / 'nope.txt'} not found"
    nested = tmp_path / "requirements.txt"
    nested.write_text("requests==2.31\n-r other.txt\n")
    assert error_line(submit("-r", str(nested), cwd=tmp_path)).startswith(
        f"stormpy: error: {nested}:2: -r names a file that is not shipped with the topology")
    assert error_line(submit("--wheels", str(tmp_path), cwd=tmp_path)) == \
        "stormpy: error: --wheels needs -r REQUIREMENTS: the wheels are what the requirements install from"
    nested.write_text("requests==2.31\n")
    assert error_line(submit("-r", str(nested), "--wheels", str(tmp_path / "empty"), cwd=tmp_path)) == \
        f"stormpy: error: --wheels {tmp_path / 'empty'} is not a directory"


def test_requirements_and_wheels_travel_in_the_code_archive(tmp_path: Path) -> None:
    topo = tmp_path / "topo" / "probe.py"
    topo.parent.mkdir()
    topo.write_text("# topology\n")
    (topo.parent / ".stormpy-requirements").mkdir()           # a stale copy in the user's dir is not shipped
    (topo.parent / ".stormpy-requirements" / "requirements.txt").write_text("stale==0\n")
    reqs = tmp_path / "reqs.txt"
    reqs.write_text("stormpy-probe-pkg==1.0\n")
    wheel = build_wheel(tmp_path / "wheels", "stormpy-probe-pkg", "1.0")
    archive = tmp_path / "code.zip"
    build_code_archive(topo, archive, None, requirement_files(reqs, tmp_path / "wheels"))
    with zipfile.ZipFile(archive) as zf:
        assert sorted(zf.namelist()) == [".stormpy-requirements/requirements.txt",
                                         f".stormpy-requirements/wheels/{wheel.name}", "probe.py"]
        assert zf.read(".stormpy-requirements/requirements.txt") == reqs.read_bytes()
