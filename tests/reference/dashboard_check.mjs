// The dashboard in a real browser: Debian's chromium, headless, driven by playwright-core. Run by
// tests/obs/dashboard_browser_test.cpp against a live `smelt dashboard` over real training runs:
//   node dashboard_check.mjs SPEC.json          SPEC: {url, smelt, chromium, runs: [dir...], report, resume_run}
//   node dashboard_check.mjs --screenshot URL OUT.png [CHROMIUM]
// What the page shows is compared with metrics.jsonl as this script reads it itself (its own
// reading of the line rules in docs/dashboard.md): every chart with data draws (its canvas holds
// pixels of each run's colour), the latest table equals the last lines, the run facts and events
// match, the vital-sign lights equal the server's verdict; lines appended to a run show within a
// few seconds, a rewritten file (a resume) is read again with a restart mark; the report written
// by `smelt report` renders the same with every network request refused. With spec.mode "tasks"
// (a run whose evaluation lines carry downstream tasks), the task charts instead: one per task,
// its points and error bars, the chance line where the task has one, the latest table's task
// rows and the task lines under the vital signs, live (also after an appended evaluation) and in
// the report. Prints a JSON list of checks; exits 1 when one failed.
import { chromium } from 'playwright-core';
import { execFileSync, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';

const checks = [];
function check(name, ok, detail = '') {
  checks.push({ name, ok: !!ok, detail: ok ? '' : String(detail) });
  return !!ok;
}

// ---- metrics.jsonl as this script reads it ------------------------------------------------

const CHART_KEYS = {
  loss: ['loss', 'eval_loss'], lr: ['lr'], grad_norm: ['grad_norm'], grad_norm_ratio: ['grad_norm_ratio'],
  tokens_per_s: ['tokens_per_s'], mfu: ['mfu', 'mfu_peak'],
  data: ['data_wait_ms', 'fetch_ms.p50', 'fetch_ms.p95', 'fetch_ms.p99'], allreduce: ['allreduce_wait_ms', 'allreduce_ms'],
  ckpt: ['ckpt_write_mb_s', 'disk_mb_s'], entropy: ['token_entropy', 'eval_entropy'], attn_sparsity: ['attn_sparsity'],
  loss_by_source: 'loss_by_source.',
};
const LATEST_KEYS = ['loss', 'eval_loss', 'eval_bpb', 'lr', 'grad_norm', 'grad_norm_ratio', 'tokens_per_s', 'mfu', 'mfu_peak',
  'step_ms', 'data_wait_ms', 'fetch_ms.p95', 'allreduce_wait_ms', 'ckpt_write_mb_s', 'token_entropy', 'attn_sparsity', 'tokens'];

function readRun(dir) {
  const text = fs.readFileSync(path.join(dir, 'metrics.jsonl'), 'utf8');
  const parts = text.split('\n');
  parts.pop();  // after the last newline: empty, or a line not finished yet
  const rows = [];     // step lines: {step, vals: {flat key: value}}
  const events = [];   // {step, kind}
  const taskMeta = {}; // task name -> {metric, chance} as the last line gave them
  let lines = 0, bad = 0, prevStall = false;
  for (const t of parts) {
    if (t.trim() === '') continue;
    lines++;
    let j;
    try { j = JSON.parse(t); } catch (e) { bad++; continue; }
    if (!j || typeof j !== 'object' || Array.isArray(j) || !Number.isInteger(j.step) || /"step"\s*:\s*-?\d+[.eE]/.test(t)) {
      bad++;
      continue;
    }
    if ('event' in j) { events.push({ step: j.step, kind: typeof j.event === 'string' ? j.event : 'event' }); continue; }
    if (rows.length && j.step <= rows[rows.length - 1].step) {
      while (rows.length && rows[rows.length - 1].step >= j.step) rows.pop();
      for (let i = events.length - 1; i >= 0; i--) if (events[i].step >= j.step) events.splice(i, 1);
      events.push({ step: j.step, kind: 'restart' });
    }
    const stall = 'ckpt_stall_ms' in j;
    if ('ckpt_write_mb_s' in j || (stall && !prevStall)) events.push({ step: j.step, kind: 'checkpoint' });
    if ('skipped' in j) events.push({ step: j.step, kind: 'skipped' });
    if ('loss_spike' in j) events.push({ step: j.step, kind: 'loss_spike' });
    prevStall = stall;
    const vals = {};
    for (const [k, v] of Object.entries(j)) {
      if (k === 'step') continue;
      if (k === 'tasks' && v && typeof v === 'object' && !Array.isArray(v)) {
        for (const [name, t] of Object.entries(v)) {
          if (!t || typeof t !== 'object' || Array.isArray(t)) continue;
          vals[`tasks.${name}.value`] = typeof t.value === 'number' ? t.value : null;
          vals[`tasks.${name}.stderr`] = typeof t.stderr === 'number' ? t.stderr : null;
          taskMeta[name] = { metric: typeof t.metric === 'string' ? t.metric : 'value', chance: typeof t.chance === 'number' ? t.chance : null };
        }
      } else if (v === null || typeof v === 'number') vals[k] = v;
      else if (v && typeof v === 'object' && !Array.isArray(v))
        for (const [k2, v2] of Object.entries(v)) if (v2 === null || typeof v2 === 'number') vals[`${k}.${k2}`] = v2;
    }
    rows.push({ step: j.step, vals });
  }
  const latest = {};
  for (const k of LATEST_KEYS) {
    for (let i = rows.length - 1; i >= 0; i--) if (k in rows[i].vals) { latest[k] = { v: rows[i].vals[k], step: rows[i].step }; break; }
  }
  // Per chart: whether the run has a value to draw, and what it draws (to tell when two runs'
  // curves are the same, the later one drawn over the earlier).
  const charts = {}, drawn = {};
  for (const [id, keys] of Object.entries(CHART_KEYS)) {
    const mine = (k) => (typeof keys === 'string' ? k.startsWith(keys) : keys.includes(k));
    const pts = [];
    for (const r of rows)
      for (const k of Object.keys(r.vals).sort()) if (mine(k) && typeof r.vals[k] === 'number') pts.push([r.step, k, r.vals[k]]);
    charts[id] = pts.length > 0;
    drawn[id] = JSON.stringify(pts);
  }
  // Per task: its chart, points (numeric values), error bars (a stderr above 0 beside a value), last value.
  const tasks = {};
  for (const [name, meta] of Object.entries(taskMeta)) {
    const key = `tasks.${name}.value`, err = `tasks.${name}.stderr`;
    const t = { ...meta, points: 0, bars: 0, last: null };
    const pts = [];
    for (const r of rows) {
      const v = r.vals[key];
      if (typeof v !== 'number') continue;
      t.points++;
      if (r.vals[err] > 0) t.bars++;
      t.last = { v, step: r.step };
      pts.push([r.step, v]);
    }
    tasks[name] = t;
    charts[`task:${name}`] = t.points > 0;
    drawn[`task:${name}`] = JSON.stringify(pts);
  }
  return { rows, events, lines, bad, latest, charts, drawn, tasks, lastStep: rows.length ? rows[rows.length - 1].step : null };
}

// ---- what the page shows ------------------------------------------------------------------

async function pageState(page) {
  return page.evaluate(() => {
    const runs = [...document.querySelectorAll('#runs .run')].map((e) => ({
      id: Number(e.dataset.run), lines: Number(e.dataset.lines), bad: Number(e.dataset.badLines),
      lastStep: e.dataset.lastStep === '' ? null : Number(e.dataset.lastStep), color: getComputedStyle(e.querySelector('.swatch')).backgroundColor,
    }));
    const cells = [...document.querySelectorAll('#latest td[data-key]')].map((td) => ({
      run: Number(td.dataset.run), key: td.dataset.key, value: td.dataset.value, step: td.dataset.step,
      text: td.childNodes[0] ? td.childNodes[0].textContent : '',
    }));
    const charts = [...document.querySelectorAll('#charts .chart')].map((c) => ({
      id: c.dataset.chart, hasData: c.dataset.hasData === 'true', series: Number(c.dataset.series || 0),
      visible: c.offsetParent !== null, title: c.querySelector('h3').textContent, values: Number(c.dataset.values || 0),
      task: c.dataset.task, metric: c.dataset.metric, chance: c.dataset.chance, errorBars: Number(c.dataset.errorBars || 0),
      chanceDrawn: c.dataset.chanceDrawn, chanceY: c.dataset.chanceY === undefined || c.dataset.chanceY === '' ? null : Number(c.dataset.chanceY),
    }));
    const taskLines = [...document.querySelectorAll('#vitals .task')].map((t) => ({
      run: Number(t.dataset.run), task: t.dataset.task, regressed: t.dataset.regressed === 'true', text: t.textContent,
    }));
    const taskWarnings = [...document.querySelectorAll('#vitals .task-warning')].map((t) => ({ run: Number(t.dataset.run), text: t.textContent }));
    const events = [...document.querySelectorAll('#events tr[data-kind]')].map((tr) => ({
      run: Number(tr.dataset.run), kind: tr.dataset.kind, step: Number(tr.dataset.step),
    }));
    const lights = [...document.querySelectorAll('#vitals .light')].map((l) => ({
      run: Number(l.dataset.run), sign: l.dataset.sign, state: l.dataset.state, now: l.dataset.now, since: Number(l.dataset.since),
      dot: getComputedStyle(l.querySelector('.dot')).backgroundColor,
    }));
    const vitalsRuns = [...document.querySelectorAll('#vitals .vitals-run')].map((v) => ({ run: Number(v.dataset.run), state: v.dataset.state }));
    return { runs, cells, charts, events, lights, vitalsRuns, taskLines, taskWarnings, mode: document.body.dataset.mode,
      renders: Number(document.body.dataset.renders || 0) };
  });
}

// Pixels of each colour in a chart's canvas: {total (not transparent), per colour}.
async function canvasPixels(page, chartId, colors) {
  return page.evaluate(([id, cols]) => {
    const sec = [...document.querySelectorAll('#charts .chart')].find((c) => c.dataset.chart === id);
    const cv = sec && sec.querySelector('canvas');
    if (!cv || !cv.width || !cv.height) return null;
    const d = cv.getContext('2d').getImageData(0, 0, cv.width, cv.height).data;
    const rgb = cols.map((c) => c.match(/\d+/g).slice(0, 3).map(Number));
    const per = rgb.map(() => 0);
    let total = 0, hash = 0;
    for (let i = 0; i < d.length; i += 4) {
      if (d[i + 3] === 0) continue;
      total++;
      hash = (hash * 31 + d[i] * 7 + d[i + 1] * 3 + d[i + 2] + (i >> 2)) | 0;
      if (d[i + 3] < 200) continue;
      rgb.forEach((c, k) => { if (Math.abs(d[i] - c[0]) + Math.abs(d[i + 1] - c[1]) + Math.abs(d[i + 2] - c[2]) < 60) per[k]++; });
    }
    return { total, per, hash, width: cv.width, height: cv.height };
  }, [chartId, colors]);
}

function near(text, v, key) {
  if (v === null) return text === '—';
  const x = Number(text.replace(/[,%]/g, ''));
  const want = key === 'mfu' || key === 'mfu_peak' ? v * 100 : v;
  return Number.isFinite(x) && Math.abs(x - want) <= 6e-3 * Math.abs(want) + 1e-12;
}

// The page against the files: charts, latest table, run facts, events (extra: events the page
// saw that the file no longer shows, e.g. a restart mark).
async function compare(page, label, expected, extraEvents = []) {
  const st = await pageState(page);
  const colors = st.runs.map((r) => r.color);
  for (const [i, ex] of expected.entries()) {
    const r = st.runs.find((x) => x.id === i);
    if (!check(`${label}: run ${i} shown`, r, JSON.stringify(st.runs))) continue;
    check(`${label}: run ${i} last step`, r.lastStep === ex.lastStep, `page ${r.lastStep}, file ${ex.lastStep}`);
    check(`${label}: run ${i} lines`, r.lines === ex.lines, `page ${r.lines}, file ${ex.lines}`);
    check(`${label}: run ${i} skipped lines`, r.bad === ex.bad, `page ${r.bad}, file ${ex.bad}`);
    const stepCell = st.cells.find((c) => c.run === i && c.key === 'step');
    check(`${label}: run ${i} latest step`, stepCell && Number(stepCell.value) === ex.lastStep, JSON.stringify(stepCell));
    for (const k of LATEST_KEYS) {
      const cell = st.cells.find((c) => c.run === i && c.key === k);
      const want = ex.latest[k];
      if (!want) {
        check(`${label}: run ${i} ${k} absent`, !cell || cell.value === 'absent', JSON.stringify(cell));
        continue;
      }
      if (!check(`${label}: run ${i} ${k} shown`, cell, 'no cell')) continue;
      const value = cell.value === 'null' ? null : Number(cell.value);
      check(`${label}: run ${i} ${k} = file`, value === want.v && Number(cell.step) === want.step,
        `page ${cell.value} @${cell.step}, file ${want.v} @${want.step}`);
      check(`${label}: run ${i} ${k} text`, near(cell.text, want.v, k), `text '${cell.text}' for ${want.v}`);
    }
    const evPage = st.events.filter((e) => e.run === i).map((e) => `${e.step}:${e.kind}`).sort();
    const evFile = ex.events.concat(extraEvents.filter((e) => e.run === i)).map((e) => `${e.step}:${e.kind}`).sort();
    check(`${label}: run ${i} events`, JSON.stringify(evPage) === JSON.stringify(evFile), `page ${evPage}, file ${evFile}`);
  }
  for (const c of st.charts) {
    const want = expected.some((ex) => ex.charts[c.id]);
    check(`${label}: chart ${c.id} has data as the files`, c.hasData === want, `page ${c.hasData}, files ${want}`);
    if (!want) { check(`${label}: chart ${c.id} hidden`, !c.visible); continue; }
    check(`${label}: chart ${c.id} visible`, c.visible);
    const px = await canvasPixels(page, c.id, colors);
    if (!check(`${label}: chart ${c.id} canvas`, px && px.width > 100 && px.height > 100, JSON.stringify(px))) continue;
    check(`${label}: chart ${c.id} drew`, px.total > 1000, `${px.total} pixels not transparent`);
    expected.forEach((ex, i) => {
      if (!ex.charts[c.id]) return;
      const over = expected.findIndex((o, k) => k > i && o.drawn[c.id] === ex.drawn[c.id]);
      if (over >= 0) checks.push({ name: `${label}: chart ${c.id}: run ${i}'s curve is run ${over}'s, drawn over it`, ok: true, detail: '' });
      else check(`${label}: chart ${c.id} draws run ${i}`, px.per[i] >= 20, `${px.per[i]} pixels of ${colors[i]}`);
    });
  }
  return st;
}

async function waitFor(page, fn, arg, ms) {
  const t0 = Date.now();
  try {
    await page.waitForFunction(fn, arg, { timeout: ms, polling: 100 });
    return Date.now() - t0;
  } catch (e) {
    return -1;
  }
}

// `smelt health --json RUN`: the vital signs as the command line reports them.
function health(smelt, dir) {
  const r = spawnSync(smelt, ['health', '--json', dir], { encoding: 'utf8' });
  try { return JSON.parse(r.stdout); } catch (e) { return { error: `smelt health ${dir}: exit ${r.status}: ${r.stderr}` }; }
}

async function getJson(url) {
  const r = await fetch(url);
  return { status: r.status, body: r.ok ? await r.json() : null };
}

// The lights against the server's verdict (GET /api/runs/N/vitals), or against the report's data.
function compareVitals(label, st, verdicts) {
  verdicts.forEach((v, i) => {
    const card = st.vitalsRuns.find((x) => x.run === i);
    if (!v || !Array.isArray(v.signs)) {
      check(`${label}: run ${i} says it has no vital signs`, card && card.state === 'none', JSON.stringify(card));
      return;
    }
    check(`${label}: run ${i} overall state`, card && card.state === v.state, `page ${card && card.state}, server ${v.state}`);
    const lights = st.lights.filter((l) => l.run === i);
    check(`${label}: run ${i} one light per sign`, lights.length === v.signs.length, `${lights.length} lights, ${v.signs.length} signs`);
    const colour = { ok: 'rgb(22, 163, 74)', warn: 'rgb(245, 158, 11)', bad: 'rgb(220, 38, 38)', unknown: 'rgb(160, 168, 179)' };
    for (const s of v.signs) {
      const l = lights.find((x) => x.sign === s.name);
      check(`${label}: run ${i} light ${s.name}`, l && l.state === s.state && l.now === s.now && l.since === s.since &&
        l.dot === colour[s.state], `page ${JSON.stringify(l)}, smelt health ${JSON.stringify(s)}`);
    }
  });
}

// ---- downstream tasks ---------------------------------------------------------------------

const CHANCE_RGB = [107, 114, 128];  // web/dashboard.js CHANCE_COLOR

// Pixels of the chance line's colour in the two canvas rows it is drawn on (y-1 and y).
async function chanceRowPixels(page, chartId, y) {
  return page.evaluate(([id, y, rgb]) => {
    const sec = [...document.querySelectorAll('#charts .chart')].find((c) => c.dataset.chart === id);
    const cv = sec && sec.querySelector('canvas');
    if (!cv || y < 1 || y >= cv.height) return null;
    const d = cv.getContext('2d').getImageData(0, y - 1, cv.width, 2).data;
    let n = 0;
    for (let i = 0; i < d.length; i += 4)
      if (d[i + 3] >= 200 && Math.abs(d[i] - rgb[0]) + Math.abs(d[i + 1] - rgb[1]) + Math.abs(d[i + 2] - rgb[2]) < 40) n++;
    return { n, width: cv.width };
  }, [chartId, y, CHANCE_RGB]);
}

// The task charts, the latest table's task rows and the task lines under the vital signs against
// the files (expected) and `smelt health --json` (verdicts).
async function checkTasks(page, label, expected, verdicts) {
  const st = await pageState(page);
  const names = [];
  for (const ex of expected) for (const n of Object.keys(ex.tasks)) if (!names.includes(n)) names.push(n);
  const taskCharts = st.charts.filter((c) => c.id.startsWith('task:'));
  check(`${label}: one chart per task`, JSON.stringify(taskCharts.map((c) => c.task)) === JSON.stringify(names),
    `page ${JSON.stringify(taskCharts.map((c) => c.task))}, files ${JSON.stringify(names)}`);
  for (const name of names) {
    const c = taskCharts.find((x) => x.task === name);
    if (!check(`${label}: task ${name} chart`, c && c.hasData && c.visible, JSON.stringify(c))) continue;
    const meta = expected.map((ex) => ex.tasks[name]).find(Boolean);
    const points = expected.reduce((n, ex) => n + (ex.tasks[name] ? ex.tasks[name].points : 0), 0);
    const bars = expected.reduce((n, ex) => n + (ex.tasks[name] ? ex.tasks[name].bars : 0), 0);
    check(`${label}: task ${name} metric in the title`, c.metric === meta.metric && c.title.includes(meta.metric), JSON.stringify(c));
    check(`${label}: task ${name} points`, c.values === points, `page ${c.values}, files ${points}`);
    check(`${label}: task ${name} error bars`, c.errorBars === bars, `page ${c.errorBars}, files ${bars}`);
    check(`${label}: task ${name} chance`, c.chance === (meta.chance === null ? '' : String(meta.chance)), `page '${c.chance}', file ${meta.chance}`);
    if (meta.chance === null) {
      check(`${label}: task ${name} has no chance line`, c.chanceDrawn === 'false' && c.chanceY === null, JSON.stringify(c));
      continue;
    }
    if (!check(`${label}: task ${name} chance line drawn`, c.chanceDrawn === 'true' && c.chanceY !== null, JSON.stringify(c))) continue;
    const px = await chanceRowPixels(page, c.id, c.chanceY);
    check(`${label}: task ${name} chance line on the canvas`, px && px.n >= px.width / 2, JSON.stringify(px));
  }
  expected.forEach((ex, i) => {
    for (const [name, t] of Object.entries(ex.tasks)) {
      const cell = st.cells.find((x) => x.run === i && x.key === `tasks.${name}.value`);
      check(`${label}: run ${i} latest ${name}`, cell && Number(cell.value) === t.last.v && Number(cell.step) === t.last.step,
        `page ${JSON.stringify(cell)}, file ${JSON.stringify(t.last)}`);
    }
  });
  verdicts.forEach((v, i) => {
    const tasks = Object.entries(v.tasks || {});
    const lines = st.taskLines.filter((t) => t.run === i);
    check(`${label}: run ${i} a line per task under the vital signs`, lines.length === tasks.length, `${lines.length} vs ${tasks.length}`);
    for (const [name, t] of tasks) {
      const l = lines.find((x) => x.task === name);
      check(`${label}: run ${i} task line ${name}`, l && l.regressed === t.regressed && l.text.includes(t.metric),
        `page ${JSON.stringify(l)}, smelt health ${JSON.stringify(t)}`);
    }
    const warns = st.taskWarnings.filter((w) => w.run === i).map((w) => w.text);
    check(`${label}: run ${i} task warnings`, JSON.stringify(warns) === JSON.stringify(v.warnings || []),
      `page ${JSON.stringify(warns)}, smelt health ${JSON.stringify(v.warnings)}`);
  });
  return st;
}

// spec.mode "tasks": the task charts live, after one more evaluation appended, and in the report.
async function tasksMain(spec, browser) {
  const ctx = await browser.newContext({ viewport: { width: 1400, height: 900 }, deviceScaleFactor: 1 });
  const page = await ctx.newPage();
  const errors = [];
  page.on('pageerror', (e) => errors.push(`page error: ${e}`));
  page.on('console', (m) => { if (m.type() === 'error') errors.push(`console: ${m.text()}`); });
  await page.goto(spec.url);
  check('tasks live: page ready', (await waitFor(page, () => document.body.dataset.ready === 'true', null, 20000)) >= 0);
  // (the vital signs come with the first poll's render, or within 5 s)
  await waitFor(page, () => document.querySelector('#vitals .vitals-run[data-state]:not([data-state="none"])'), null, 8000);
  let expected = spec.runs.map(readRun);
  let verdicts = spec.runs.map((d) => health(spec.smelt, d));
  check('tasks: the files hold tasks', expected.some((ex) => Object.keys(ex.tasks).length >= 2), JSON.stringify(expected.map((ex) => ex.tasks)));
  await compare(page, 'tasks live', expected);
  await checkTasks(page, 'tasks live', expected, verdicts);
  compareVitals('tasks live', await pageState(page), verdicts);
  // Log scale redraws the task charts too.
  await page.check('#log-scale');
  await page.waitForTimeout(300);
  for (const name of Object.keys(expected[0].tasks)) {
    const px = await canvasPixels(page, `task:${name}`, []);
    check(`tasks log scale: ${name} drew`, px && px.total > 1000, JSON.stringify(px));
  }
  await page.uncheck('#log-scale');
  await page.waitForTimeout(300);
  // One more evaluation appended: a point more on each task chart.
  if (spec.append) {
    fs.appendFileSync(path.join(spec.runs[0], 'metrics.jsonl'), `${JSON.stringify(spec.append)}\n`);
    const took = await waitFor(page, (s) => {
      const td = document.querySelector('#latest td[data-run="0"][data-key="step"]');
      return td && Number(td.dataset.value) === s;
    }, spec.append.step, 10000);
    check('tasks append: shown within 5 s', took >= 0 && took <= 5000, `took ${took} ms`);
    await page.waitForTimeout(5500);  // the vital signs are asked for at most every 5 s
    expected = spec.runs.map(readRun);
    verdicts = spec.runs.map((d) => health(spec.smelt, d));
    await compare(page, 'tasks append', expected);
    await checkTasks(page, 'tasks append', expected, verdicts);
  }
  check('tasks live: no script or console errors', errors.length === 0, errors.join('; '));
  if (spec.screenshot) await page.screenshot({ path: spec.screenshot, fullPage: true });
  await ctx.close();
  // The report, offline.
  execFileSync(spec.smelt, ['report', ...spec.runs, '-o', spec.report], { stdio: ['ignore', 'ignore', 'inherit'] });
  const rctx = await browser.newContext({ viewport: { width: 1400, height: 900 }, deviceScaleFactor: 1, offline: true });
  const rpage = await rctx.newPage();
  const rerrors = [];
  rpage.on('pageerror', (e) => rerrors.push(`page error: ${e}`));
  await rpage.goto('file://' + path.resolve(spec.report));
  check('tasks report: ready', (await waitFor(rpage, () => document.body.dataset.ready === 'true', null, 20000)) >= 0);
  await compare(rpage, 'tasks report', expected);
  await checkTasks(rpage, 'tasks report', expected, verdicts);
  check('tasks report: no script errors', rerrors.length === 0, rerrors.join('; '));
  await rctx.close();
}

async function screenshot(url, out, exe) {
  const browser = await chromium.launch({ executablePath: exe || '/usr/bin/chromium', headless: true });
  const page = await browser.newPage({ viewport: { width: 1400, height: 900 }, deviceScaleFactor: 1 });
  await page.goto(url);
  await page.waitForSelector('body[data-ready="true"]', { timeout: 20000 });
  await page.waitForTimeout(500);
  await page.screenshot({ path: out, fullPage: true });
  await browser.close();
}

async function main() {
  if (process.argv[2] === '--screenshot') return screenshot(process.argv[3], process.argv[4], process.argv[5]);
  const spec = JSON.parse(fs.readFileSync(process.argv[2], 'utf8'));
  const browser = await chromium.launch({ executablePath: spec.chromium || '/usr/bin/chromium', headless: true });
  if (spec.mode === 'tasks') {
    try { await tasksMain(spec, browser); } finally { await browser.close(); }
    return;
  }
  try {
    // ---- the live page
    const ctx = await browser.newContext({ viewport: { width: 1400, height: 900 }, deviceScaleFactor: 1 });
    const page = await ctx.newPage();
    const errors = [];
    page.on('pageerror', (e) => errors.push(`page error: ${e}`));
    page.on('console', (m) => { if (m.type() === 'error') errors.push(`console: ${m.text()}`); });
    await page.goto(spec.url);
    check('live: page ready', (await waitFor(page, () => document.body.dataset.ready === 'true', null, 20000)) >= 0);
    let expected = spec.runs.map(readRun);
    let st = await compare(page, 'live', expected);
    check('live: mode', st.mode === 'live', st.mode);
    check('live: runs overlaid', st.runs.length === spec.runs.length && new Set(st.runs.map((r) => r.color)).size === st.runs.length);
    const info = (await getJson(new URL('api/runs', spec.url))).body;
    check('live: the server has vital signs', info.vitals === true, JSON.stringify(info));
    // The lights against `smelt health --json`, and the server's own answer against it.
    const vitalsNow = async (label) => {
      const verdicts = spec.runs.map((d) => health(spec.smelt, d));
      for (let i = 0; i < spec.runs.length; i++) {
        const api = (await getJson(new URL(`api/runs/${i}/vitals`, spec.url))).body;
        check(`${label}: /api/runs/${i}/vitals = smelt health --json`, JSON.stringify(api) === JSON.stringify(verdicts[i]),
          `${JSON.stringify(api)} vs ${JSON.stringify(verdicts[i])}`);
      }
      return verdicts;
    };
    compareVitals('live', st, await vitalsNow('live'));

    // ---- log scale and smoothing redraw every chart
    const colors = st.runs.map((r) => r.color);
    const before = await canvasPixels(page, 'loss', colors);
    await page.check('#log-scale');
    await page.waitForTimeout(300);
    for (const c of st.charts.filter((c) => c.hasData)) {
      const px = await canvasPixels(page, c.id, colors);
      check(`log scale: chart ${c.id} drew`, px && px.total > 1000, JSON.stringify(px));
    }
    const logged = await canvasPixels(page, 'loss', colors);
    check('log scale: the loss chart changed', logged.hash !== before.hash);
    await page.uncheck('#log-scale');
    await page.$eval('#smoothing', (e) => { e.value = '0.9'; e.dispatchEvent(new Event('input')); });
    await page.waitForTimeout(300);
    const smooth = await canvasPixels(page, 'loss', colors);
    check('smoothing: the loss chart changed', smooth.hash !== before.hash && smooth.per[0] >= 20, JSON.stringify(smooth));
    await page.$eval('#smoothing', (e) => { e.value = '0'; e.dispatchEvent(new Event('input')); });
    await page.waitForTimeout(300);
    const back = await canvasPixels(page, 'loss', colors);
    check('smoothing off: the loss chart as before', back.hash === before.hash);

    // ---- lines appended to a live run show within a few seconds
    const m0 = path.join(spec.runs[0], 'metrics.jsonl');
    const last = expected[0].rows[expected[0].rows.length - 1];
    const s1 = last.step + 1, s2 = last.step + 2, s3 = last.step + 3;
    const line1 = {
      step: s1, loss: 2.5, lr: 0.00125, grad_norm: 0.75, grad_norm_ratio: 1.25, tokens: (last.vals.tokens || 0) + 64,
      token_entropy: 2.75, loss_by_source: { web: 2.25, 'appended/source': 3.5 }, tokens_per_s: 4321.5, mfu: 0.375,
      mfu_peak: 0.0625, step_ms: 12.5, forward_ms: 5.25, data_wait_ms: 1.5, fetch_ms: { p50: 0.25, p95: 0.5, p99: 0.75 },
      allreduce_ms: 3.5, allreduce_wait_ms: 2.25, attn_sparsity: 0.625, eval_loss: 2.625, eval_bpb: 1.125, eval_entropy: 2.5,
      ckpt_write_mb_s: 321.5, ckpt_stall_ms: 4.5,
    };
    const line2 = { step: s2, loss: null, lr: 0.00125, grad_norm: null, skipped: 'nonfinite', tokens: line1.tokens + 64 };
    const ev = { step: s2, event: 'rollback', to: 'x', to_step: s1, documents: 3 };
    const torn = JSON.stringify({ step: s3, loss: 2.375, lr: 0.001, tokens: line2.tokens + 64 });
    const t0 = Date.now();
    fs.appendFileSync(m0, `${JSON.stringify(line1)}\n${JSON.stringify(line2)}\nnot json {\n${JSON.stringify(ev)}\n${torn.slice(0, 20)}`);
    const took = await waitFor(page, (s) => {
      const td = document.querySelector('#latest td[data-run="0"][data-key="step"]');
      return td && Number(td.dataset.value) === s;
    }, s2, 10000);
    check('append: the page shows the new lines within 5 s', took >= 0 && took <= 5000, `took ${took} ms`);
    checks.push({ name: `append: shown after ${Date.now() - t0} ms`, ok: true, detail: '' });
    await page.waitForTimeout(200);
    expected = spec.runs.map(readRun);
    st = await compare(page, 'append', expected);
    const ar = st.charts.find((c) => c.id === 'allreduce');
    check('append: the all-reduce chart appeared', ar && ar.hasData && ar.visible, JSON.stringify(ar));
    const src = st.charts.find((c) => c.id === 'loss_by_source');
    check('append: a new data source is a new series', src && src.series >= 2, JSON.stringify(src));
    check('append: the torn line is not shown yet', expected[0].lastStep === s2);
    fs.appendFileSync(m0, `${torn.slice(20)}\n`);
    const took2 = await waitFor(page, (s) => {
      const td = document.querySelector('#latest td[data-run="0"][data-key="step"]');
      return td && Number(td.dataset.value) === s;
    }, s3, 10000);
    check('append: the finished line shows', took2 >= 0, `took ${took2} ms`);
    await page.waitForTimeout(200);
    expected = spec.runs.map(readRun);
    await compare(page, 'append finished', expected);

    // ---- a resume rewrites a run's file (kept up to its checkpoint, renamed over): read again, marked
    const extra = [];
    if (spec.runs.length > 1) {
      const dir = spec.runs[1];
      const m1 = path.join(dir, 'metrics.jsonl');
      const text = fs.readFileSync(m1, 'utf8').split('\n').filter((l) => l.trim() !== '');
      const keepTo = expected[1].rows[Math.max(0, expected[1].rows.length - 6)].step;
      const kept = text.filter((l) => { try { return JSON.parse(l).step <= keepTo; } catch (e) { return false; } });
      const resumed = Object.assign({}, JSON.parse(kept.filter((l) => !('event' in JSON.parse(l))).pop()), { step: keepTo + 1, step_ms: 99.125, loss: 3.125 });
      fs.writeFileSync(`${m1}.tmp`, `${kept.join('\n')}\n${JSON.stringify(resumed)}\n`);
      fs.renameSync(`${m1}.tmp`, m1);
      const took3 = await waitFor(page, (s) => {
        const td = document.querySelector('#latest td[data-run="1"][data-key="step"]');
        return td && Number(td.dataset.value) === s;
      }, keepTo + 1, 10000);
      check('resume: the rewritten file is read again', took3 >= 0 && took3 <= 5000, `took ${took3} ms`);
      await page.waitForTimeout(200);
      extra.push({ run: 1, step: keepTo + 1, kind: 'restart' });
      expected = spec.runs.map(readRun);
      await compare(page, 'resume', expected, extra);
    }
    // Prometheus text agrees with the page.
    const prom = await (await fetch(new URL('metrics', spec.url))).text();
    const name0 = info.runs[0].name.replace(/\\/g, '\\\\').replace(/"/g, '\\"');
    const stepLine = prom.split('\n').find((l) => l.startsWith(`smelt_train_step{run="${name0}"}`));
    check('/metrics: the step the page shows', stepLine && Number(stepLine.split(' ').pop()) === s3, stepLine);
    // The page asks for vital signs at most every 5 s: wait for the lights to follow the file.
    const final = await vitalsNow('end');
    await page.waitForTimeout(5500);
    st = await pageState(page);
    compareVitals('end', st, final);
    check('live: no script or console errors', errors.length === 0, errors.join('; '));
    if (spec.screenshot) await page.screenshot({ path: spec.screenshot, fullPage: true });
    await ctx.close();

    // ---- the report, opened from a file with the network refused
    execFileSync(spec.smelt, ['report', ...spec.runs, '-o', spec.report], { stdio: ['ignore', 'ignore', 'inherit'] });
    const rctx = await browser.newContext({ viewport: { width: 1400, height: 900 }, deviceScaleFactor: 1, offline: true });
    const requests = [];
    await rctx.route('**/*', (route) => {
      const u = route.request().url();
      if (u.startsWith('file:') && decodeURIComponent(new URL(u).pathname) === path.resolve(spec.report)) return route.continue();
      requests.push(u);
      return route.abort();
    });
    const rpage = await rctx.newPage();
    const rerrors = [];
    rpage.on('request', (q) => { if (!q.url().startsWith('file:')) requests.push(q.url()); });
    rpage.on('pageerror', (e) => rerrors.push(`page error: ${e}`));
    rpage.on('console', (m) => { if (m.type() === 'error') rerrors.push(`console: ${m.text()}`); });
    await rpage.goto('file://' + path.resolve(spec.report));
    check('report: ready', (await waitFor(rpage, () => document.body.dataset.ready === 'true', null, 20000)) >= 0);
    const rst = await compare(rpage, 'report', expected);
    check('report: mode', rst.mode === 'report', rst.mode);
    check('report: the same charts as the live page',
      JSON.stringify(rst.charts.map((c) => [c.id, c.hasData, c.series])) === JSON.stringify(st.charts.map((c) => [c.id, c.hasData, c.series])),
      `${JSON.stringify(rst.charts)} vs ${JSON.stringify(st.charts)}`);
    compareVitals('report', rst, final);
    check('report: no network request', requests.length === 0, requests.join(', '));
    check('report: no script or console errors', rerrors.length === 0, rerrors.join('; '));
    await rctx.close();
  } finally {
    await browser.close();
  }
}

main().then(() => {
  console.log(JSON.stringify({ checks }, null, 1));
  process.exit(checks.every((c) => c.ok) ? 0 : 1);
}, (e) => {
  console.log(JSON.stringify({ checks, error: String(e && e.stack || e) }, null, 1));
  process.exit(1);
});
