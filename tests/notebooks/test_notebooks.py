"""The analysis notebooks run from top to bottom, draw their figures, and are stored without outputs.

Each notebook is executed by nbclient on the ``python3`` (ipykernel) kernel in a
copy inside a temporary directory, so a run leaves nothing behind in
``notebooks/``. ``01-traces`` reads the Darshan logs beside the repository
(``tests/data/darshan``, handed to it as ``IEZ_DARSHAN_DIR``); ``03-live``
starts its own ``iez api`` on a free port because ``IEZ_API_URL`` is unset here.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
from jupyter_client.kernelspec import KernelSpecManager, NoSuchKernel
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
NOTEBOOKS = REPO / "notebooks"
NAMES = ("01-traces", "02-placement", "03-live")
DARSHAN_DIR = REPO / "tests" / "data" / "darshan"
POLICIES = ("rr", "qos", "paper", "iez")
PAPER_SCENARIOS = ("paper-ior-fpp-sc8-8", "paper-ior-fpp-sc8-16", "paper-ior-fpp-sc8-64", "paper-ior-fpp-sc4-64",
                   "paper-hacc-fpp-sc8-8", "paper-hacc-fpp-sc8-16", "paper-hacc-fpp-sc8-32",
                   "paper-ior-ssf-sc8-16", "paper-ior-ssf-sc8-32", "paper-concurrent")
CELL_TIMEOUT_S = 120
KERNEL = "python3"


def stored(name: str):
    return nbformat.read(NOTEBOOKS / f"{name}.ipynb", as_version=4)


def outputs(nb) -> list[dict]:
    return [out for cell in nb.cells if cell.cell_type == "code" for out in cell.outputs]


def text_of(nb) -> str:
    """Everything the executed notebook printed or displayed as text (streams, reprs, HTML tables)."""
    parts = []
    for out in outputs(nb):
        if out.output_type == "stream":
            parts.append(out.text)
        for mime in ("text/plain", "text/html"):
            parts.append(out.get("data", {}).get(mime, ""))
    return "\n".join(parts)


def ensure_kernel() -> None:
    """A ``python3`` kernelspec: pip's ipykernel ships one into sys.prefix; install it there if it is missing."""
    try:
        KernelSpecManager().get_kernel_spec(KERNEL)
    except NoSuchKernel:
        subprocess.run([sys.executable, "-m", "ipykernel", "install", "--sys-prefix", "--name", KERNEL],
                       check=True, capture_output=True)
        KernelSpecManager().get_kernel_spec(KERNEL)


@pytest.fixture(scope="module")
def executed(tmp_path_factory):
    """``executed(name)``: the notebook after a full run (each notebook runs once per module)."""
    assert DARSHAN_DIR.is_dir() and any(DARSHAN_DIR.glob("*.darshan")), \
        f"the Darshan logs 01-traces reads are missing from {DARSHAN_DIR}"
    ensure_kernel()
    done: dict[str, nbformat.NotebookNode] = {}

    def run(name: str):
        if name not in done:
            workdir = tmp_path_factory.mktemp(name)
            copy = workdir / f"{name}.ipynb"
            shutil.copy(NOTEBOOKS / f"{name}.ipynb", copy)
            nb = nbformat.read(copy, as_version=4)
            client = NotebookClient(nb, timeout=CELL_TIMEOUT_S, kernel_name=KERNEL,
                                    resources={"metadata": {"path": str(workdir)}})
            with pytest.MonkeyPatch.context() as env:  # the kernel inherits this process's environment
                env.setenv("IEZ_DARSHAN_DIR", str(DARSHAN_DIR))
                env.delenv("IEZ_API_URL", raising=False)
                try:
                    client.execute()
                except CellExecutionError as err:
                    pytest.fail(f"notebooks/{name}.ipynb failed:\n{err}")
            nbformat.write(nb, copy)  # the executed copy, for a look when a check below fails
            done[name] = nb
        return done[name]

    return run


def test_the_three_notebooks_are_stored():
    assert sorted(p.stem for p in NOTEBOOKS.glob("*.ipynb")) == sorted(NAMES)


@pytest.mark.parametrize("name", NAMES)
def test_stored_notebooks_carry_no_outputs(name):
    nb = stored(name)
    nbformat.validate(nb)
    # every cell has its own id in the file itself (nbformat adds missing ones on reading, with a warning that
    # says it will become an error)
    ids = [cell.get("id") for cell in json.loads((NOTEBOOKS / f"{name}.ipynb").read_text())["cells"]]
    assert None not in ids and len(set(ids)) == len(ids), f"{name}: cells without an id or sharing one: {ids}"
    assert nb.metadata["kernelspec"]["name"] == KERNEL
    for cell in nb.cells:
        if cell.cell_type == "code":
            assert cell.outputs == [] and cell.execution_count is None, \
                f"{name}: strip the outputs before committing (cell {cell.get('id')})"


@pytest.mark.parametrize("name", NAMES)
def test_notebook_runs_and_draws_figures_of_every_policy(name, executed):
    nb = executed(name)
    assert not [o for o in outputs(nb) if o.output_type == "error"]
    pngs = [o for o in outputs(nb) if "image/png" in o.get("data", {})]
    assert len(pngs) >= 3, f"{name} drew {len(pngs)} figures"
    text = text_of(nb)
    for policy in POLICIES:
        assert re.search(rf"\b{policy}\b", text), f"{name} shows nothing of policy {policy}"


def test_placement_notebook_tabulates_ostcost_of_every_policy_and_paper_scenario(executed):
    nb = executed("02-placement")
    tables = [o["data"]["text/plain"] for o in outputs(nb)
              if "text/html" in o.get("data", {}) and o["data"]["text/plain"].startswith("OSTCost")]
    assert tables, "02-placement shows no OSTCost table"
    header = tables[0].splitlines()[0].split()
    assert header == ["OSTCost", *POLICIES, "bound"]
    for scenario in PAPER_SCENARIOS:
        assert scenario in tables[0]
    per_ost_figures = [c for c in nb.cells if c.cell_type == "code" and c.source.startswith("ost_bars(")]
    assert {c.source for c in per_ost_figures} >= {'ost_bars("paper-ior-fpp-sc8-64");', 'ost_bars("paper-concurrent");'}
    assert all("image/png" in o.get("data", {}) for c in per_ost_figures for o in c.outputs)


def test_traces_notebook_reads_the_darshan_logs_and_forecasts_with_iez_predict(executed):
    text = text_of(executed("01-traces"))
    assert f"logs in {DARSHAN_DIR}" in text and "theta-imbalanced-io" in text
    assert "Darshan section is skipped" not in text
    assert "order (p,d,q)" in text and "accuracy (%)" in text


def test_live_notebook_starts_feeds_and_stops_its_own_api(executed):
    text = text_of(executed("03-live"))
    started = re.search(r"started iez api \(pid (\d+)\)", text)
    assert started and "stopped iez api" in text
    assert "fs-OST000e" in text  # 3 OSS x 5 OSTs reported over POST /v1/stats
    with pytest.raises(ProcessLookupError):
        os.kill(int(started.group(1)), 0)
