"""The documentation site: it builds with warnings as errors, and every command it shows runs.

Each page's ```bash blocks are run as one shell script, in the order a reader types them, from a
scratch directory that has the clone's ``docs/`` and ``examples/`` (the pages say "from the root
of the clone"). ``stormpy`` there is the working tree's CLI with ``--config`` appended, whose file
moves every port the pages use onto a free one (and the same literal port numbers in the
commands are moved with it), so the pages' commands run literally against real daemons without
colliding with other tests. A page that shows a command must be in ``PAGES`` (how its run is
checked) or ``NOT_RUN`` (why it cannot run here): a new page's commands cannot go untested.
"""
from __future__ import annotations

import json
import os
import re
import shlex
import signal
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import psutil
import pytest

from stormpy.testing import free_port

REPO = Path(__file__).resolve().parents[2]
DOCS = REPO / "docs"
#: The site .ci/run has just built with the same ``-W`` (set by it; read at import, as the suite's
#: autouse fixture takes STORMPY_* variables out of each test's environment).
BUILT_HTML = os.environ.get("STORMPY_DOCS_HTML", "")

#: Ports the pages name (defaults and the second supervisor's), moved onto free ports per run.
PAGE_PORTS = (2181, 6627, 6700, 6701, 6702, 6703, 6710, 6711, 8000, 8001, 8080)


@dataclass(frozen=True)
class Page:
    """How a page's commands are checked: text each must print, and how long they may take."""

    expect: tuple[str, ...] = ()
    timeout: float = 120
    slow: bool = False
    needs: tuple[str, ...] = ()                 # programs the commands need (else: skip)


#: Every page whose commands the test runs.
PAGES: dict[str, Page] = {
    "index.md": Page(expect=("count task",)),
    "tutorials/first-topology.md": Page(expect=("top words: the=", "2 passed")),
    "tutorials/first-cluster.md": Page(expect=("No topologies running.", "wordcount", "==> 127.0.0.1:",
                                               "storm_topology_acked_total{"),
                                       timeout=300, slow=True, needs=("java", "curl")),
    "tutorials/trident-exactly-once.md": Page(expect=("OK: 1200 words, every count exact", "OK: 400 rows, every line exactly once"),
                                              timeout=400, slow=True, needs=("java",)),
    "how-to/connectors.md": Page(expect=("as expected for 5 passes",), timeout=300, slow=True, needs=("java",)),
    "how-to/security.md": Page(expect=("added UI user 'ops' in conf/ui-users",)),
    "how-to/testing.md": Page(expect=("4 passed",)),
    "how-to/windows-and-state.md": Page(expect=("2 passed", "no component reported an error")),
    "tutorials/from-streamparse.md": Page(expect=("streamparse project", "environment 'prod'", "no component reported an error")),
}

#: Pages whose commands cannot run in a test, and why. Keep this short.
NOT_RUN: dict[str, str] = {
    "how-to/multi-host.md": "needs several hosts; tests/cluster/test_hosts.py runs these daemons on network namespaces",
    "how-to/nimbus-ha.md": "needs several hosts; tests/cluster/test_nimbus_ha.py and test_hosts.py fail a leader over",
    "how-to/dependencies.md": "needs a cluster and a package index; tests/cluster/test_cluster_requirements.py "
                              "submits with -r and --wheels",
    "reference/security-settings.md": "writes /etc/stormpy/certs; tests/test_tls_units.py runs these `stormpy certs` "
                                      "commands in a scratch directory and loads the page's storm.yaml",
    "how-to/operate-cluster.md": "its one command records a 180 MB class archive in 30-60 s: "
                                 "tests/spark/test_class_archive.py runs the page's block and starts Spark with it",
    "reference/streamparse.md": "needs streamparse in a virtualenv of its own and Leiningen; "
                                "tests/streamparse/test_real_sparse_cli.py runs these sparse commands (SPARSE_VENV)",
}

#: Never run: the test environment already has the package and its extras installed (by .ci/run).
INSTALL = re.compile(r"pip install (-e '?\.(\[[\w,]+\])?'?|pytest)(?=\s|$|;|&)")


def doc_pages() -> list[Path]:
    return sorted(p for p in DOCS.rglob("*.md") if "_build" not in p.parts)


def shell_blocks(page: Path) -> list[str]:
    """The bodies of a page's ```bash fences, in order."""
    return re.findall(r"^```bash\n(.*?)^```", page.read_text(), flags=re.S | re.M)


def _rel(page: Path) -> str:
    return page.relative_to(DOCS).as_posix()


# ---------------------------------------------------------------- the site itself

def test_site_builds_with_warnings_as_errors(tmp_path: Path) -> None:
    """``sphinx-build -W`` (as .ci/run runs it): broken links, unknown config keys, CLI options or
    Thrift names, and pages outside the navigation are all errors."""
    for module in ("sphinx", "myst_parser", "furo", "sphinx_click", "sphinxcontrib.mermaid"):
        pytest.importorskip(module, reason=f"{module} is in the docs extra: pip install -e '.[docs]'")
    if BUILT_HTML and (Path(BUILT_HTML) / "index.html").is_file():
        out = Path(BUILT_HTML)    # .ci/run's build of the same pages passed: its pages are checked below
    else:
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p)}
        out = tmp_path / "html"
        result = subprocess.run([sys.executable, "-m", "sphinx", "-W", "--keep-going", "-q", "-b", "html",
                                 str(DOCS), str(out), "-d", str(tmp_path / "doctrees")],
                                capture_output=True, text=True, env=env, timeout=600)
        assert result.returncode == 0, result.stdout + result.stderr
    config_page = (out / "reference" / "config.html").read_text()
    from stormpy.config import KEYS

    missing = [name for name in KEYS if f'id="confval-{name}"' not in config_page]
    assert not missing, f"config keys missing from the reference: {missing}"
    cli_page = (out / "reference" / "cli.html").read_text()
    from stormpy.cli import main

    assert all(f"stormpy-{name}" in cli_page for name in main.commands), "a CLI command is missing"


def test_dangling_links_fail_the_build(tmp_path: Path) -> None:
    """Renaming a config key, CLI option or Thrift call that a page links must fail ``-W``: build
    a copy of the site whose pages link names that do not exist."""
    pytest.importorskip("sphinx")
    pytest.importorskip("myst_parser")
    copy = tmp_path / "docs"
    subprocess.run(["cp", "-r", str(DOCS), str(copy)], check=True)
    page = copy / "tutorials" / "first-topology.md"
    text = page.read_text()
    for good, bad in (("{confval}`topology.message.timeout.secs`", "{confval}`topology.message.timeout.seconds`"),
                      ("{option}`stormpy local --duration`", "{option}`stormpy local --seconds`")):
        assert good in text
        text = text.replace(good, bad)
    page.write_text(text)
    concept = copy / "concepts" / "architecture.md"
    assert "{thrift}`Nimbus.submitTopology`" in concept.read_text()
    concept.write_text(concept.read_text().replace("{thrift}`Nimbus.submitTopology`", "{thrift}`Nimbus.uploadTopology`"))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p)}
    result = subprocess.run([sys.executable, "-m", "sphinx", "-W", "--keep-going", "-q", "-b", "html", str(copy),
                             str(tmp_path / "html")], capture_output=True, text=True, env=env, timeout=600)
    assert result.returncode != 0
    for name in ("topology.message.timeout.seconds", "--seconds", "Nimbus.uploadTopology"):
        assert name in result.stderr, result.stderr


def test_every_page_with_commands_is_run() -> None:
    shown = {_rel(p) for p in doc_pages() if shell_blocks(p)}
    untested = sorted(shown - set(PAGES) - set(NOT_RUN))
    assert not untested, f"pages whose commands no test runs (add them to PAGES): {untested}"
    gone = sorted((set(PAGES) | set(NOT_RUN)) - shown)
    assert not gone, f"PAGES/NOT_RUN name pages without commands: {gone}"


def test_the_readme_links_into_the_site() -> None:
    """The README is the front page: its links to the site's sources and other files resolve, and
    it links every how-to, concept and reference page."""
    readme = (REPO / "README.md").read_text()
    targets = re.findall(r"\]\(([^)#]+)\)", readme)
    missing = [t for t in targets if not t.startswith("http") and not (REPO / t).exists()]
    assert not missing, f"README links to files that do not exist: {missing}"
    pages = {p.relative_to(REPO).as_posix() for p in doc_pages() if p.parent != DOCS}
    unlinked = sorted(pages - set(targets))
    assert not unlinked, f"README's Documentation list misses: {unlinked}"


def test_the_cli_summary_names_every_command() -> None:
    """The hand-written table of reference/cli.md (the generated reference follows it) lists every
    command the CLI has, so a new command cannot be left out of the summary."""
    from stormpy.cli import main

    table = (DOCS / "reference" / "cli.md").read_text().split("```{eval-rst}", 1)[0]
    named = set(re.findall(r"^\| `stormpy ([\w-]+)", table, flags=re.M))
    named |= set(re.findall(r"` / `(?:stormpy )?([\w-]+) NAME`", table))
    hidden = {name for name, command in main.commands.items() if getattr(command, "hidden", False)}
    missing = sorted(set(main.commands) - named - hidden)
    assert not missing, f"reference/cli.md's table misses: {missing}"


def test_the_readme_example_runs(tmp_path: Path) -> None:
    """The README's first Python block (its 20-line example) runs as written with ``stormpy local``."""
    blocks = re.findall(r"^```python\n(.*?)^```", (REPO / "README.md").read_text(), flags=re.S | re.M)
    assert blocks, "README.md shows no Python example"
    (tmp_path / "readme_example.py").write_text(blocks[0])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p)}
    result = subprocess.run([sys.executable, "-m", "stormpy.cli", "local", "readme_example.py", "--duration", "3"],
                            cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "no component reported an error" in result.stdout + result.stderr


def test_ci_runs_the_readmes_test_command() -> None:
    """README.md opens with two commands, the second the test command, and ``.ci/run`` "runs the
    same test command": its pytest line is that command with the arguments ``.ci/run`` is given."""
    readme_test = (REPO / "README.md").read_text().splitlines()[2]
    command = readme_test.split(" && ", 1)[1]
    ci_run = (REPO / ".ci" / "run").read_text().splitlines()
    ci_lines = [line for line in ci_run if line.startswith("python3 -m pytest")]
    assert ci_lines == [f'{command} "$@"'], (readme_test, ci_lines)


#: Fences a page may use: run (bash), checked (yaml, mermaid by the build's diagrams), or output.
FENCES = {"bash", "yaml", "text", "mermaid"}


def test_code_on_pages_is_run_or_included_from_snippets() -> None:
    """Python code is never pasted into a page: it is ``literalinclude``d from docs/snippets/ (or
    examples/), where the tests run it; plain fences are only those this module checks."""
    for page in doc_pages():
        for lang in re.findall(r"^```(\w[\w-]*)\s*$", page.read_text(), flags=re.M):
            assert lang in FENCES, f"{_rel(page)}: a ```{lang} block; put code in docs/snippets/ and include it"
        for target in re.findall(r"^```\{literalinclude\}\s+(\S+)", page.read_text(), flags=re.M):
            included = (page.parent / target).resolve()
            assert included.is_file(), f"{_rel(page)}: {target} does not exist"
            assert included.is_relative_to(DOCS / "snippets") or included.is_relative_to(REPO / "examples"), target
    text = "\n".join(page.read_text() for page in doc_pages())
    orphans = [s.relative_to(DOCS).as_posix() for s in (DOCS / "snippets").rglob("*.py")
               if "__pycache__" not in s.parts and s.stat().st_size and s.name not in text]
    assert not orphans, f"snippets no page shows or runs: {orphans}"


def test_every_storm_yaml_on_the_site_is_valid() -> None:
    """Each ```yaml block that starts with ``# storm.yaml`` loads, with known keys of valid types."""
    import yaml

    from stormpy.config import Config, unknown_keys

    checked = 0
    for page in doc_pages():
        for block in re.findall(r"^```yaml\n(.*?)^```", page.read_text(), flags=re.S | re.M):
            yaml.safe_load(block)     # every YAML block parses (prometheus.yml too)
            if not block.startswith("# storm.yaml"):
                continue
            values = yaml.safe_load(block)
            assert isinstance(values, dict), f"{_rel(page)}: a storm.yaml block that is not a mapping"
            assert not unknown_keys(values), f"{_rel(page)}: unknown keys {unknown_keys(values)}"
            Config(values)            # raises ConfigError naming a key whose value has the wrong type
            checked += 1
    assert checked >= 2


# ---------------------------------------------------------------- running a page's commands

@dataclass
class Scratch:
    """A scratch working directory with a ``stormpy`` on PATH that uses the page's config."""

    root: Path
    ports: dict[int, int] = field(default_factory=dict)

    def config(self) -> dict[str, object]:
        p = self.ports
        return {"storm.zookeeper.port": p[2181], "dev.zookeeper.path": str(self.root / "dev-zookeeper"),
                "nimbus.seeds": ["127.0.0.1"], "nimbus.thrift.port": p[6627],
                "storm.local.hostname": "127.0.0.1",
                "supervisor.slots.ports": [p[6700], p[6701], p[6702], p[6703]],
                "logviewer.port": p[8000], "ui.port": p[8080], "ui.host": "127.0.0.1",
                "nimbus.monitor.freq.secs": 2}

    def script(self, text: str) -> str:
        """``text`` with the page's port numbers moved onto this run's free ports."""
        for page_port, port in self.ports.items():
            text = re.sub(rf"(?<![\d.]){page_port}(?!\d)", str(port), text)
        return text

    def setup(self) -> None:
        self.ports = {port: free_port() for port in PAGE_PORTS}
        for name in ("docs", "examples"):
            (self.root / name).symlink_to(REPO / name)
        conf = self.root / "test-storm.yaml"
        conf.write_text(json.dumps(self.config()))
        bin_dir = self.root / "bin"
        bin_dir.mkdir()
        shim = bin_dir / "stormpy"
        python = shlex.quote(sys.executable)
        # A command that names its own --config (a page's storm.yaml) keeps it.
        shim.write_text("#!/bin/sh\n"
                        'case "$1" in version|--version|-h|--help|"") '
                        f'exec {python} -m stormpy.cli "$@";; esac\n'
                        'for arg in "$@"; do [ "$arg" = --config ] && '
                        f'exec {python} -m stormpy.cli "$@"; done\n'
                        f'exec {python} -m stormpy.cli "$@" --config {shlex.quote(str(conf))}\n')
        shim.chmod(0o755)

    def env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("STORMPY_")}
        env["PATH"] = f"{self.root / 'bin'}{os.pathsep}{os.path.dirname(sys.executable)}{os.pathsep}{env.get('PATH', '')}"
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p)
        env["PYTHONUNBUFFERED"] = "1"
        return env

    def leftovers(self) -> list[psutil.Process]:
        """Processes still running from this directory (daemons, workers the page started)."""
        found = []
        me = os.getpid()
        for proc in psutil.process_iter(["cwd", "pid"]):
            try:
                cwd = proc.info["cwd"] or ""
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                continue
            if proc.info["pid"] != me and (cwd == str(self.root) or cwd.startswith(str(self.root) + os.sep)):
                found.append(proc)
        return found


def run_page(rel: str, spec: Page, tmp_path: Path) -> Path:
    """Run the page's commands; returns the directory they ran in (their files are there)."""
    for program in spec.needs:
        if subprocess.run(["sh", "-c", f"command -v {program}"], capture_output=True).returncode != 0:
            pytest.skip(f"{rel} needs {program}, which is not installed")
    scratch = Scratch(tmp_path / "work")
    scratch.root.mkdir()
    scratch.setup()
    blocks = shell_blocks(DOCS / rel)
    lines = ["set -euo pipefail"]
    for block in blocks:
        lines += [INSTALL.sub("true", line) for line in block.splitlines()]
    script = scratch.script("\n".join(lines) + "\n")
    (scratch.root / "page.sh").write_text(script)
    proc = subprocess.Popen(["bash", "page.sh"], cwd=scratch.root, env=scratch.env(), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        output, _ = proc.communicate(timeout=spec.timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        output, _ = proc.communicate()
        pytest.fail(f"{rel}: commands still running after {spec.timeout:g}s\n{output[-6000:]}\n"
                    f"{_daemon_outputs(scratch.root)}")
    finally:
        for leftover in scratch.leftovers():
            try:
                leftover.kill()
            except psutil.NoSuchProcess:
                pass
        psutil.wait_procs(scratch.leftovers(), timeout=10)
    assert proc.returncode == 0, f"{rel}: exit {proc.returncode}\n{output[-6000:]}\n{_daemon_outputs(scratch.root)}"
    for text in spec.expect:
        assert text in output, f"{rel}: {text!r} not in the output\n{output[-6000:]}"
    return scratch.root


def _daemon_outputs(root: Path) -> str:
    return "\n".join(f"--- {p.name} ---\n{p.read_text(errors='replace')[-3000:]}" for p in sorted(root.glob("*.out")))


@pytest.mark.parametrize("rel", [r for r, s in PAGES.items() if not s.slow])
def test_page_commands(rel: str, tmp_path: Path) -> None:
    run_page(rel, PAGES[rel], tmp_path)


@pytest.mark.slow
@pytest.mark.parametrize("rel", [r for r, s in PAGES.items() if s.slow])
def test_page_commands_on_a_cluster(rel: str, tmp_path: Path) -> None:
    root = run_page(rel, PAGES[rel], tmp_path)
    if rel == "tutorials/first-cluster.md":
        # The Prometheus page's families are what the tutorial's scrape holds.
        scrape = (root / "metrics.txt").read_text()
        # Both supervisors run: the second one's command (its own dirs, slots and log viewer port)
        # works as written; a page that drops e.g. its logviewer.port makes it refuse to start.
        assert re.search(r"^storm_cluster_supervisors 2(\.0)?$", scrape, flags=re.M), \
            "the tutorial's second supervisor is not running:\n" + (root / "supervisor-2.out").read_text()[-3000:]
        listed = set(re.findall(r"`(storm_[a-z_]+)`", (DOCS / "how-to" / "prometheus.md").read_text()))
        assert listed, "the Prometheus page lists no metric"
        missing = sorted(name for name in listed if not re.search(rf"^{name}[{{ ]", scrape, flags=re.M))
        assert not missing, f"how-to/prometheus.md lists metrics the UI does not serve: {missing}"
