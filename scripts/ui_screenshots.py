"""Pictures of the Prefect UI (docs/RETRAINING.md, docs/PIPELINE.md) and of a report, taken with headless Chromium.

    .venv/bin/python scripts/ui_screenshots.py            # or: make screenshots

1. `prefect_deployments.png` and `prefect_flow_run.png`: a real `prefect server start` on a free port, with
   its own PREFECT_HOME in a temporary folder; the project's deployments registered by `python -m
   flows.deploy` (the runner of `make deploy`); one small run of `trinity-prepare` (every suite, a few items
   each, written into the temporary folder, never into the DVC outputs); then the UI's deployments page,
   that run's page on its Artifacts tab, and its `prepared-suites` table artifact (`prefect_artifact.png`).
2. `prefect_pipeline_runs.png` (`--only pipeline`, after a `make run`): the flow run of every stage of that
   run, from the database of the Prefect server `trinity run` started (`--prefect-home`).
3. `report_first_section.png` (`--only report`, written beside the report in `reports/`, not in the docs: a picture
   of one run's figures goes stale with the next run): the opening of `reports/report.md` after a `make run`, else
   of the routing benchmark's committed copy (title, summary, the first results subsection up to its first
   table), rendered from Markdown to HTML and photographed.

Each PNG is reduced to a 256-colour palette; the script fails when one is still over `--max-kb`. Needs a
Chromium binary (`apt-get install chromium`); nothing else beyond the project's .venv. `--only report`
skips the Prefect part.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import html
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable", "chrome")
RESERVED_PORTS = range(8631, 8634)   # the local pool's llama.cpp servers
# the default's report after a `make run`; before one, the committed copy of the routing benchmark's
REPORT = next(p for p in (REPO / "reports/report.md", REPO / "docs/benchmarks/routing_benchmark/make_run/report.md")
              if p.exists() or "routing_benchmark" in str(p))
SMALL_RUN = ["tasks.max_items_per_suite=8"]


class ScreenshotError(RuntimeError):
    pass


# --- chromium ----------------------------------------------------------------------------------------

def find_chromium(explicit: str | None) -> str:
    for name in ([explicit] if explicit else CHROMIUM_NAMES):
        found = shutil.which(name)
        if found:
            return found
    raise ScreenshotError(
        f"no Chromium found ({explicit or ', '.join(CHROMIUM_NAMES)} not on PATH). Install it, e.g. "
        "`sudo apt-get install chromium` (Debian/Ubuntu; `chromium-browser` on older Ubuntu), "
        "or pass --chromium PATH.")


class Chromium:
    """One headless Chromium driven over the DevTools protocol (a websocket; no extra package): the Prefect
    UI is a JS app that fetches from the API after it loads, so a picture is taken only once the page shows
    the text it is expected to show (not a blank page or a spinner), after a click on a tab where needed."""

    def __init__(self, binary: str):
        self.profile = tempfile.mkdtemp(prefix="chromium-profile-")
        args = [binary, "--headless", "--disable-gpu", "--hide-scrollbars", "--no-first-run",
                "--force-device-scale-factor=1", "--remote-debugging-port=0", "--remote-allow-origins=*",
                f"--user-data-dir={self.profile}", "about:blank"]
        if hasattr(os, "geteuid") and os.geteuid() == 0:
            args.insert(1, "--no-sandbox")   # Chromium refuses to start as root with its sandbox
        self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        port = None
        deadline = time.monotonic() + 60
        seen = []
        while port is None and time.monotonic() < deadline:
            line = self.proc.stderr.readline()
            if not line and self.proc.poll() is not None:
                break
            seen.append(line)
            m = re.search(r"DevTools listening on ws://[^:]+:(\d+)/", line)
            port = int(m.group(1)) if m else None
        if port is None:
            self.close()
            raise ScreenshotError("chromium did not start: " + "".join(seen)[-1500:])
        threading.Thread(target=self.proc.stderr.read, daemon=True).start()   # keep its pipe drained
        import httpx
        from websockets.sync.client import connect

        page = next(t for t in httpx.get(f"http://127.0.0.1:{port}/json/list", timeout=10).json()
                    if t["type"] == "page")
        self.ws = connect(page["webSocketDebuggerUrl"], max_size=None)
        self.next_id = 0

    def call(self, method: str, **params):
        self.next_id += 1
        self.ws.send(json.dumps({"id": self.next_id, "method": method, "params": params}))
        while True:
            reply = json.loads(self.ws.recv(timeout=120))
            if reply.get("id") == self.next_id:
                if "error" in reply:
                    raise ScreenshotError(f"chromium {method}: {reply['error']}")
                return reply["result"]

    def evaluate(self, expression: str):
        return self.call("Runtime.evaluate", expression=expression, returnByValue=True)["result"].get("value")

    def wait_for_text(self, texts: list[str], timeout_s: float, url: str) -> None:
        probe = "(document.body ? document.body.innerText : '')"
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            shown = self.evaluate(probe) or ""
            if all(t in shown for t in texts):
                return
            time.sleep(0.5)
        raise ScreenshotError(f"{url} did not show {texts} within {timeout_s:.0f} s; it shows: {shown[:600]!r}")

    def shoot(self, url: str, out: Path, width: int, height: int | None, expect: list[str],
              click: str | None = None, expect_after_click: list[str] = (), settle_s: float = 2.0,
              timeout_s: float = 90) -> None:
        """Open `url` at `width` x `height` (None: the page's full height, for a page that scrolls as a
        whole, not the Prefect UI's inner panes), wait until it shows every text
        of `expect`, click the button or tab labelled `click` and wait for `expect_after_click`, then save
        the viewport as `out` (`settle_s` lets charts and transitions finish)."""
        self.call("Emulation.setDeviceMetricsOverride", width=width, height=height or 800, deviceScaleFactor=1,
                  mobile=False)
        self.call("Page.navigate", url=url)
        self.wait_for_text(expect, timeout_s, url)
        if click:
            found = self.evaluate(
                "(() => { const leaf = [...document.querySelectorAll('body *')].find(e => !e.children.length"
                f" && e.textContent.trim() === {json.dumps(click)});"
                " if (!leaf) return false;"
                " (leaf.closest('button, [role=tab], a, li') || leaf).click(); return true; })()")
            if not found:
                raise ScreenshotError(f"{url} has no {click!r} tab or button to click")
            self.wait_for_text(list(expect_after_click), timeout_s, url)
        time.sleep(settle_s)
        if height is None:
            full = int(self.evaluate("document.documentElement.scrollHeight"))
            self.call("Emulation.setDeviceMetricsOverride", width=width, height=full, deviceScaleFactor=1,
                      mobile=False)
            time.sleep(0.5)
        shot = self.call("Page.captureScreenshot", format="png")
        out.write_bytes(base64.b64decode(shot["data"]))

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.ws.close()
        stop(self.proc)
        shutil.rmtree(self.profile, ignore_errors=True)


def compress(path: Path, max_kb: int) -> int:
    """Palette PNG (the pictures are text and flat colours). Returns the size in bytes; raises when it is
    still over `max_kb`."""
    from PIL import Image

    image = Image.open(path).convert("RGB")
    image.quantize(colors=256, method=Image.Quantize.MEDIANCUT).save(path, optimize=True)
    size = path.stat().st_size
    if size > max_kb * 1000:
        raise ScreenshotError(f"{path} is {size / 1000:.0f} kB, over the {max_kb} kB limit: use a smaller "
                              "--width/--height or --report-width")
    return size


# --- the report --------------------------------------------------------------------------------------

def first_section(markdown: str) -> str:
    """The report's opening: from its title through its first results subsection, up to (not including)
    that subsection's second table with the paragraph that introduces it; at the latest, before the third
    heading of level 2 or 3. The per-suite tables that follow would make the picture three screens long.
    HTML comments (a copy's provenance note) are left out."""
    lines = re.sub(r"<!--.*?-->\s*", "", markdown, flags=re.S).splitlines()
    kept: list[str] = []
    headings = tables = 0
    for i, line in enumerate(lines):
        if re.match(r"#{2,3} ", line):
            headings += 1
            if headings == 3:
                break
        if line.startswith("|") and not (i and lines[i - 1].startswith("|")):
            tables += 1
            if tables == 2:
                while kept and not kept[-1].strip():
                    kept.pop()
                while kept and kept[-1].strip():   # the paragraph that introduces this table
                    kept.pop()
                break
        kept.append(line)
    return "\n".join(kept).strip() + "\n"


PAGE = """<!doctype html><html><head><meta charset="utf-8"><title>{title}</title><style>
body {{ font: 15px/1.5 -apple-system, "Segoe UI", "DejaVu Sans", Helvetica, Arial, sans-serif; color: #1f2328;
       background: #fff; margin: 0; padding: 24px 32px; }}
h1 {{ font-size: 26px; border-bottom: 1px solid #d1d9e0; padding-bottom: 6px; margin-top: 0; }}
h2 {{ font-size: 21px; border-bottom: 1px solid #d1d9e0; padding-bottom: 4px; margin-top: 22px; }}
h3 {{ font-size: 17px; margin-top: 18px; }}
code {{ font: 13px "DejaVu Sans Mono", monospace; background: #eff1f3; padding: 1px 4px; border-radius: 4px; }}
table {{ border-collapse: collapse; font-size: 13px; margin: 8px 0 14px; }}
th, td {{ border: 1px solid #d1d9e0; padding: 3px 9px; text-align: left; white-space: nowrap; }}
tr:nth-child(2n) td {{ background: #f6f8fa; }}
li {{ margin: 3px 0; }}
</style></head><body>
{body}
</body></html>
"""


def render_report(browser: Chromium, report: Path, out: Path, width: int, max_kb: int) -> int:
    from markdown_it import MarkdownIt

    section = first_section(report.read_text())
    body = MarkdownIt("commonmark").enable("table").render(section)
    title = section.splitlines()[0].lstrip("# ").strip()
    with tempfile.TemporaryDirectory(prefix="report-html-") as tmp:
        page = Path(tmp) / "report.html"
        page.write_text(PAGE.format(title=html.escape(report.name), body=body))
        browser.shoot(page.as_uri(), out, width, None, expect=[title], settle_s=0.5)
    return compress(out, max_kb)


# --- the Prefect UI ------------------------------------------------------------------------------------

def free_port() -> int:
    while True:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port not in RESERVED_PORTS:
            return port


def wait_for(predicate, timeout_s: float, what: str, procs: list[subprocess.Popen], logs: Path):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for p in procs:
            if p.poll() is not None:
                raise ScreenshotError(f"{what}: {p.args[1:4]} exited with {p.returncode}; logs in {logs}")
        try:
            value = predicate()
        except Exception:
            value = None
        if value:
            return value
        time.sleep(1)
    raise ScreenshotError(f"timed out after {timeout_s:.0f} s waiting for {what}; logs in {logs}")


def stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def ui_screenshots(browser: Chromium, out_dir: Path, root: Path, width: int, height: int, run_height: int,
                   max_kb: int) -> dict[str, int]:
    import httpx
    from prefect.client.orchestration import get_client
    from prefect.deployments import run_deployment
    from prefect.settings import PREFECT_API_URL, temporary_settings

    from trinity import config

    port = free_port()
    base = f"http://127.0.0.1:{port}"
    api = f"{base}/api"
    logs = root / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    # the UI asks the API at PREFECT_UI_API_URL (else PREFECT_API_URL, else port 4200)
    env = {**os.environ, "PREFECT_HOME": str(root / "prefect"), "PREFECT_API_URL": api, "PREFECT_UI_API_URL": api,
           "PREFECT_SERVER_ANALYTICS_ENABLED": "false", "DO_NOT_TRACK": "1", "PYTHONPATH": str(REPO)}
    env.pop("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", None)
    cfg = config.compose([*SMALL_RUN, f"paths.ad_hoc_runs={root}/runs"])
    params = root / "params.yaml"
    params.write_text(config.to_yaml(cfg))

    procs: list[subprocess.Popen] = []
    sizes: dict[str, int] = {}
    try:
        print(f"prefect server on {base} (PREFECT_HOME={root / 'prefect'})", flush=True)
        procs.append(subprocess.Popen(
            [str(BIN / "prefect"), "server", "start", "--host", "127.0.0.1", "--port", str(port)],
            env=env, cwd=root, stderr=subprocess.STDOUT,
            stdout=open(logs / "server.log", "wb")))  # noqa: SIM115 (the server's log)
        wait_for(lambda: httpx.get(f"{api}/health", timeout=2).status_code == 200, 240, "the prefect server",
                 procs, logs)
        procs.append(subprocess.Popen([sys.executable, "-m", "flows.deploy"], env=env, cwd=REPO,
                                      stdout=open(logs / "deploy.log", "wb"),  # noqa: SIM115 (its log)
                                      stderr=subprocess.STDOUT))

        with temporary_settings({PREFECT_API_URL: api}):
            async def deployment_names():
                async with get_client() as client:
                    return [d.name for d in await client.read_deployments()]

            wait_for(lambda: "trinity-retrain" in asyncio.run(deployment_names()), 240,
                     "flows.deploy to register the deployments", procs, logs)
            print("running trinity-prepare (small: " + " ".join(SMALL_RUN) + ")", flush=True)
            run = run_deployment("prepare/trinity-prepare", parameters={"params": str(params)}, timeout=600)
            if run.state is None or not run.state.is_completed():
                raise ScreenshotError(f"the trinity-prepare run ended {run.state}; logs in {logs}")

            async def run_artifacts():
                from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterFlowRunId

                async with get_client() as client:
                    found = await client.read_artifacts(
                        artifact_filter=ArtifactFilter(flow_run_id=ArtifactFilterFlowRunId(any_=[run.id])))
                    return {a.key: a for a in found if a.key}

            table = asyncio.run(run_artifacts()).get("prepared-suites")
            if table is None:
                raise ScreenshotError(f"the trinity-prepare run made no prepared-suites artifact; logs in {logs}")

        print(f"screenshots of {base}/deployments and of the run {run.name} ({run.id})", flush=True)
        browser.shoot(f"{base}/deployments", out_dir / "prefect_deployments.png", width, height,
                      expect=["trinity-prepare", "trinity-retrain", "Ready"])
        sizes["prefect_deployments.png"] = compress(out_dir / "prefect_deployments.png", max_kb)
        # the Artifacts tab, clicked: a `?tab=Artifacts` link falls back to Logs while the run is loading
        browser.shoot(f"{base}/runs/flow-run/{run.id}", out_dir / "prefect_flow_run.png", width, run_height,
                      expect=[run.name, "Completed", "Artifacts"], click="Artifacts",
                      expect_after_click=["prepared-suites", "prepare-outputs"])
        sizes["prefect_flow_run.png"] = compress(out_dir / "prefect_flow_run.png", max_kb)
        browser.shoot(f"{base}/artifacts/artifact/{table.id}", out_dir / "prefect_artifact.png", width, height,
                      expect=["prepared-suites", "mmlu"])
        sizes["prefect_artifact.png"] = compress(out_dir / "prefect_artifact.png", max_kb)
    finally:
        for p in reversed(procs):
            stop(p)
    return sizes


def pipeline_runs_screenshot(browser: Chromium, out_dir: Path, prefect_home: Path, width: int, height: int,
                             max_kb: int, root: Path) -> dict[str, int]:
    """`prefect_pipeline_runs.png`: the flow runs of the last `make run`, as its Prefect server kept them (the
    server `trinity run` starts keeps its database in PREFECT_HOME, by default .trinity/prefect): a server on
    that home and a free port, then the UI's runs page, which must list a flow run of every stage."""
    import httpx

    port = free_port()
    base, logs = f"http://127.0.0.1:{port}", root / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "PREFECT_HOME": str(prefect_home), "PREFECT_API_URL": f"{base}/api",
           "PREFECT_UI_API_URL": f"{base}/api", "PREFECT_SERVER_ANALYTICS_ENABLED": "false", "DO_NOT_TRACK": "1"}
    server = subprocess.Popen([str(BIN / "prefect"), "server", "start", "--host", "127.0.0.1", "--port", str(port)],
                              env=env, cwd=root, stderr=subprocess.STDOUT,
                              stdout=open(logs / "server.log", "wb"))  # noqa: SIM115 (the server's log)
    try:
        wait_for(lambda: httpx.get(f"{base}/api/health", timeout=2).status_code == 200, 240, "the prefect server",
                 [server], logs)
        browser.shoot(f"{base}/runs", out_dir / "prefect_pipeline_runs.png", width, max(height, 1500),
                      expect=["evolve", "evaluate", "Flow runs"], settle_s=4.0)
        return {"prefect_pipeline_runs.png": compress(out_dir / "prefect_pipeline_runs.png", max_kb)}
    finally:
        stop(server)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=str(REPO / "docs/images"), help="folder of the PNGs (default docs/images)")
    ap.add_argument("--report", default=str(REPORT), help="the report whose first section is rendered")
    ap.add_argument("--only", choices=("ui", "report", "pipeline"), default=None, help="take only these pictures")
    ap.add_argument("--prefect-home", default=str(REPO / ".trinity/prefect"),
                    help="the PREFECT_HOME of the `make run` whose flow runs `pipeline` shows "
                         "(default .trinity/prefect)")
    ap.add_argument("--chromium", default=None, help="the Chromium binary (default: the first on PATH)")
    ap.add_argument("--width", type=int, default=1280, help="viewport width of the UI pictures")
    ap.add_argument("--height", type=int, default=800, help="viewport height of the deployments picture")
    ap.add_argument("--run-height", type=int, default=1000,
                    help="viewport height of the flow run picture (its artifacts sit under the run's graph)")
    ap.add_argument("--report-width", type=int, default=1400, help="viewport width of the report picture")
    ap.add_argument("--max-kb", type=int, default=300, help="fail when a PNG is larger (kB)")
    ap.add_argument("--keep", action="store_true", help="keep the temporary folder (server logs, the run)")
    args = ap.parse_args()

    browser = None
    try:
        browser = Chromium(find_chromium(args.chromium))
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        sizes: dict[str, int] = {}
        if args.only == "report":
            shot = REPO / "reports" / "report_first_section.png"
            shot.parent.mkdir(parents=True, exist_ok=True)
            sizes["report_first_section.png"] = render_report(browser, Path(args.report), shot, args.report_width,
                                                              args.max_kb)
        if args.only == "pipeline":
            root = Path(tempfile.mkdtemp(prefix="trinity-ui-screenshots-"))
            try:
                sizes.update(pipeline_runs_screenshot(browser, out, Path(args.prefect_home), args.width,
                                                      args.height, args.max_kb, root))
            finally:
                shutil.rmtree(root, ignore_errors=True)
        if args.only in (None, "ui"):
            root = Path(tempfile.mkdtemp(prefix="trinity-ui-screenshots-"))
            try:
                sizes.update(ui_screenshots(browser, out, root, args.width, args.height, args.run_height,
                                            args.max_kb))
            finally:
                if args.keep:
                    print(f"kept {root}")
                else:
                    shutil.rmtree(root, ignore_errors=True)
    except ScreenshotError as e:
        hint = "" if args.keep or "logs in" not in str(e) else " (gone: rerun with --keep to keep them)"
        sys.exit(f"ui_screenshots: {e}{hint}")
    finally:
        if browser is not None:
            browser.close()
    for name, size in sizes.items():
        print(f"{out / name}: {size / 1000:.0f} kB")


if __name__ == "__main__":
    main()
