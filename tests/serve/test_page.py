"""The page at `/`, driven in headless Chromium against the real `specdec serve` (built-in pair).

What a user of the page sees is checked against what the API says: the streamed answer's
text equals the `"stream": false` answer to the same request (temperature 0, a fixed k, so
both runs make the same rounds), its figures agree with the spans on screen and with the
server's `timings`, and the simulation's expected value is stats.expected_tokens_per_round.
The page must load nothing from anywhere but this server and log no console error.

Needs Debian's `chromium` and `chromium-driver` (/usr/bin/chromium, /usr/bin/chromedriver)
and the pip package selenium; skipped, saying so, when the browser or its driver is missing.
Example of one answer's check: 24 token spans, 9 steps -> #tokens "24", #tokens-per-step "2.67".
"""

from __future__ import annotations

import colorsys
import json
import shutil
import tempfile
import urllib.request

import pytest

from specdec_cli.tuning.speedup import expected_tokens_per_round

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMEDRIVER = shutil.which("chromedriver")

pytestmark = [
    pytest.mark.model,
    pytest.mark.skipif(
        CHROMIUM is None or CHROMEDRIVER is None,
        reason="the page test needs Chromium and its driver: apt-get install chromium chromium-driver",
    ),
]

PROMPT = "Write a haiku about the sea."  # the built-in pair disagrees on it at k = 3: rejections, a newline
DRAFT_TOKENS = 3  # fixed, so that the page's run and the API's make the same rounds (auto times them)
STREAM_SECONDS = 120  # 24 tokens of the built-in pair on a 2-core CPU take a few seconds
SOURCES = ("draft", "correction", "bonus", "forced", "target")
HUES = {"draft": (90, 150), "correction": (30, 65), "bonus": (165, 200), "forced": (280, 330)}  # degrees: green, yellow, cyan, magenta
BROWSER_INTERNAL = ("chrome:", "chrome-extension:", "data:", "about:", "devtools:")


@pytest.fixture(scope="module")
def browser():
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    profile = tempfile.TemporaryDirectory(prefix="specdec-page-")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in (
        "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync",
        f"--user-data-dir={profile.name}", "--window-size=1200,1400",
    ):  # fmt: skip
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL", "performance": "ALL"})
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    driver.set_page_load_timeout(30)
    try:
        yield driver
    finally:
        driver.quit()
        profile.cleanup()


def requested_urls(driver) -> list[str]:
    """Every URL the browser asked for since the last call (the performance log drains)."""
    urls = []
    for entry in driver.get_log("performance"):
        message = json.loads(entry["message"])["message"]
        if message["method"] == "Network.requestWillBeSent":
            urls.append(message["params"]["request"]["url"])
    return urls


def console_problems(driver) -> list[dict]:
    return [e for e in driver.get_log("browser") if e["level"] in ("SEVERE", "WARNING")]


def assert_only_this_server(driver, base: str) -> None:
    urls = [u for u in requested_urls(driver) if not u.startswith(BROWSER_INTERNAL)]
    assert urls, "the performance log saw no request at all"
    outside = [u for u in urls if not (u == base or u.startswith(base + "/"))]
    assert not outside, f"the page fetched from elsewhere: {outside}"


def text_of(driver, element_id: str) -> str:
    return driver.find_element("id", element_id).text


def hue(css_color: str) -> float:
    """The hue in degrees of a computed colour. Example: "rgb(17, 99, 41)" -> 136.8 (green)."""
    r, g, b = (int(v) / 255 for v in css_color[css_color.index("(") + 1 : css_color.index(")")].split(",")[:3])
    return colorsys.rgb_to_hsv(r, g, b)[0] * 360


def api_answer(base: str, body: dict) -> dict:
    request = urllib.request.Request(base + "/v1/chat/completions", data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})  # fmt: skip
    with urllib.request.urlopen(request, timeout=STREAM_SECONDS) as response:
        return json.load(response)


def test_page_loads_everything_from_this_server_without_console_errors(live_server, browser):
    browser.get(live_server.url + "/")
    assert browser.title == "specdec"
    for element_id in ("prompt", "send", "answer", "steps", "tokens-per-step", "tokens", "acceptance", "sim-rate", "sim-k", "sim-expected"):  # fmt: skip
        assert browser.find_elements("id", element_id), f"#{element_id} missing"
    assert browser.execute_script("return document.styleSheets.length") == 1  # page.css arrived and parsed
    legend = {e.get_attribute("class") for e in browser.find_elements("css selector", "#legend .tok")}
    assert legend == {f"tok {s}" for s in SOURCES + ("rejected",)}
    requested = requested_urls(browser)
    assert live_server.url + "/static/page.js" in requested and live_server.url + "/static/page.css" in requested
    outside = [u for u in requested if not u.startswith(BROWSER_INTERNAL) and not u.startswith(live_server.url + "/")]
    assert not outside, f"the page fetched from elsewhere: {outside}"
    assert console_problems(browser) == []


def test_answer_streams_in_provenance_colours_and_matches_the_api(live_server, browser):
    from selenium.webdriver.support.select import Select
    from selenium.webdriver.support.ui import WebDriverWait

    base = live_server.url
    browser.get(base + "/")
    browser.find_element("id", "prompt").send_keys(PROMPT)
    browser.find_element("id", "temperature").send_keys("0")  # max tokens left blank: the server's -n 24
    Select(browser.find_element("id", "draft-tokens")).select_by_visible_text(str(DRAFT_TOKENS))
    browser.find_element("id", "show-rejected").click()
    browser.find_element("id", "send").click()
    WebDriverWait(browser, STREAM_SECONDS).until(lambda d: d.find_element("id", "answer").get_attribute("data-done") is not None)

    assert text_of(browser, "error") == "", text_of(browser, "error")
    assert browser.find_element("id", "answer").get_attribute("data-done") == "true", text_of(browser, "status")
    spans = browser.execute_script(
        "return [...document.querySelectorAll('#answer .tok')].map(s => [s.className, s.textContent,"
        " getComputedStyle(s).color, getComputedStyle(s).display])"
    )
    tokens = [(cls.split()[1], text, color) for cls, text, color, _ in spans if cls.split()[1] in SOURCES]
    rejected = [(text, display) for cls, text, _, display in spans if cls == "tok rejected"]
    assert all(cls.split()[0] == "tok" and cls.split()[1] in SOURCES + ("rejected",) for cls, *_ in spans), spans
    assert any(source in ("draft", "correction", "bonus") for source, _, _ in tokens), f"nothing drafted: {tokens}"
    assert rejected, "no rejected draft on screen: pick a PROMPT on which the built-in pair disagrees"
    assert all(display == "inline" for _, display in rejected)  # "show rejected drafts" is on
    classes = [cls.split()[1] for cls, *_ in spans]
    assert all(classes[i + 1] == "correction" for i, c in enumerate(classes) if c == "rejected")  # in place
    assert classes.count("rejected") == classes.count("correction")  # each correction replaced a draft
    by_source = {}
    for source, _, color in tokens:
        by_source.setdefault(source, set()).add(color)
    assert all(len(colors) == 1 for colors in by_source.values()), by_source  # one colour per source
    assert len({next(iter(c)) for c in by_source.values()}) == len(by_source), by_source  # and each its own
    for source, (low, high) in HUES.items():  # the CLI's green, yellow and cyan
        assert all(low <= hue(c) <= high for c in by_source.get(source, ())), (source, by_source[source])

    # The figures, against the spans on screen.
    steps, shown_tokens = int(text_of(browser, "steps")), int(text_of(browser, "tokens"))
    per_step = float(text_of(browser, "tokens-per-step"))
    assert shown_tokens == len(tokens) > 0
    assert steps > 0 and abs(per_step - shown_tokens / steps) <= 0.005 + 1e-9
    targets = sum(source != "draft" for source, _, _ in tokens)
    assert targets <= steps <= targets + 1  # one target token a round; the last may end without it
    rows = browser.execute_script(
        "return [...document.querySelectorAll('#acceptance tbody tr')].map(r => [+r.dataset.position, +r.dataset.tried, +r.dataset.accepted])"
    )
    assert rows and [r[0] for r in rows] == list(range(1, len(rows) + 1)) and len(rows) <= DRAFT_TOKENS
    assert sum(accepted for _, _, accepted in rows) == sum(source == "draft" for source, _, _ in tokens)
    rejections = sum(tried - accepted for _, tried, accepted in rows)  # rounds that ended in a rejection
    assert rejections - 1 <= classes.count("correction") <= rejections  # the last one's correction may be cut
    # Position i + 1 is tried only after position i was accepted (in a round that drafted i + 1).
    assert all(tried >= accepted and (i == 0 or tried <= rows[i - 1][2]) for i, (_, tried, accepted) in enumerate(rows))

    # The same request whole: same text, same token count, same rounds.
    whole = api_answer(base, {"messages": [{"role": "user", "content": PROMPT}], "stream": False, "temperature": 0, "draft_tokens": DRAFT_TOKENS})  # fmt: skip
    text = "".join(t for _, t, _ in tokens)
    assert text == whole["choices"][0]["message"]["content"]
    assert shown_tokens == whole["usage"]["completion_tokens"] <= 24
    assert steps == whole["timings"]["target_passes"]
    rates = [accepted / tried if tried else 0.0 for _, tried, accepted in rows]
    assert rates == pytest.approx(whole["timings"]["acceptance_by_position"])

    # With "show rejected drafts" off the struck-out drafts leave the page; the text stays.
    browser.find_element("id", "show-rejected").click()
    assert browser.execute_script("return [...document.querySelectorAll('#answer .tok.rejected')].every(s => getComputedStyle(s).display === 'none')")  # fmt: skip
    assert_only_this_server(browser, base)
    assert console_problems(browser) == []


def test_simulation_shows_the_expected_tokens_per_step_for_its_sliders(live_server, browser):
    from selenium.webdriver.support.ui import WebDriverWait

    browser.get(live_server.url + "/")
    set_slider = "const s = document.getElementById(arguments[0]); s.value = arguments[1]; s.dispatchEvent(new Event('input'));"
    for rate, k in ((50, 2), (90, 6), (100, 3), (10, 1)):
        browser.execute_script(set_slider, "sim-rate", rate)
        browser.execute_script(set_slider, "sim-k", k)
        assert text_of(browser, "sim-expected") == f"{expected_tokens_per_round(rate / 100, k):.2f}", (rate, k)
    browser.execute_script(set_slider, "sim-rate", 50)
    browser.execute_script(set_slider, "sim-k", 2)
    assert text_of(browser, "sim-expected") == "1.75"  # (1 - 0.5^3) / (1 - 0.5)
    WebDriverWait(browser, 20).until(lambda d: int(text_of(d, "sim-steps")) >= 3)  # it plays rounds
    steps, tokens, measured = browser.execute_script(
        "return ['sim-steps', 'sim-tokens', 'sim-measured'].map(id => document.getElementById(id).textContent)"
    )
    assert int(steps) <= int(tokens) <= 3 * int(steps)  # 1..k + 1 tokens a step
    assert abs(float(measured) - int(tokens) / int(steps)) <= 0.005 + 1e-9
    cells = browser.execute_script("return [...document.querySelectorAll('#sim-rounds li[data-done] .cell')].map(c => c.className)")
    assert {"cell draft", "cell rejected", "cell correction", "cell bonus"} >= set(cells) - {"cell unchecked"}
    assert console_problems(browser) == []


def test_an_error_from_the_server_is_shown_on_the_page(live_server, browser):
    from selenium.webdriver.support.ui import WebDriverWait

    browser.get(live_server.url + "/")
    browser.find_element("id", "prompt").send_keys(PROMPT)
    browser.find_element("id", "temperature").send_keys("-1")
    browser.find_element("id", "send").click()
    WebDriverWait(browser, 30).until(lambda d: d.find_element("id", "answer").get_attribute("data-done") is not None)
    message = text_of(browser, "error")
    assert "temperature" in message and "-1" in message, message
    assert browser.find_elements("css selector", "#answer .tok") == []
    problems = console_problems(browser)  # the 400 itself is logged by Chromium as a failed resource
    assert all("status of 400" in p["message"] for p in problems), problems


def test_the_slots_panel_shows_each_slot_and_the_sequences_each_target_pass_held(live_server, browser):
    """Two requests at once, then the page's slots panel against GET /slots: a row per slot (the
    server's --slots 4), each slot's last job's tokens and tokens per pass, each under its own
    header (aligned as the header is: a stray rule once put them beside the tokens), and the target
    passes counted by how many sequences they held. Example: passes {"1": 30, "2": 11} ->
    "big-model steps by sequences they held: 30 with 1, 11 with 2"."""
    from collections import Counter
    from concurrent.futures import ThreadPoolExecutor

    from selenium.webdriver.support.ui import WebDriverWait

    base = live_server.url
    bodies = [{"messages": [{"role": "user", "content": p}], "stream": False, "temperature": 0} for p in (PROMPT, "Name three rivers.")]
    with ThreadPoolExecutor(max_workers=2) as pool:
        answers = list(pool.map(lambda b: api_answer(base, b), bodies, timeout=STREAM_SECONDS))
    with urllib.request.urlopen(base + "/slots", timeout=10) as response:
        report = json.load(response)
    assert len(report["slots"]) == 4 and not any(s["busy"] for s in report["slots"])
    passes = {int(n): count for n, count in report["target_passes"].items()}
    assert max(passes) >= 2, f"the two requests never shared a target pass: {passes}"
    # the batcher's timings: the target's passes took time, and two requests' rounds made spans between passes
    assert report["busy_seconds"]["target"] > 0 and report["between_passes"]["spans"] > 0 and report["between_passes"]["seconds"] > 0

    browser.get(base + "/")
    WebDriverWait(browser, 20).until(lambda d: text_of(d, "passes") != "")
    rows = browser.execute_script("return [...document.querySelectorAll('#slots tbody tr')].map(r => [...r.cells].map(c => c.textContent))")
    assert [r[0] for r in rows] == [str(s["slot"]) for s in report["slots"]]
    assert all(r[1] == "free" for r in rows)
    assert [r[2] for r in rows] == ["–" if s["tokens"] is None else str(s["tokens"]) for s in report["slots"]]  # None: a slot no job of ours used
    for row, s in zip(rows, report["slots"]):
        if s["rounds"]:
            assert abs(float(row[3]) - s["tokens"] / s["rounds"]) <= 0.005 + 1e-9, (row, s)
    aligned = browser.execute_script(
        "const t = document.getElementById('slots');"
        "return [...t.tHead.rows[0].cells].map((h, i) => [getComputedStyle(h).textAlign, getComputedStyle(t.tBodies[0].rows[0].cells[i]).textAlign]);"
    )
    assert all(header == cell for header, cell in aligned), aligned
    shown = Counter(int(r[2]) for r in rows if r[2] not in ("–", "0"))
    assert shown >= Counter(a["usage"]["completion_tokens"] for a in answers), (rows, answers)
    held = ", ".join(f"{count} with {n}" for n, count in sorted(passes.items()))
    assert text_of(browser, "passes") == f"big-model steps by sequences they held: {held}"
    assert console_problems(browser) == []
