// The page of `smelt dashboard` and `smelt report` (docs/dashboard.md): the runs' metrics.jsonl
// lines as uPlot charts (one colour per run, events as vertical marks; one chart per downstream
// task, with its error bars and chance level), the latest values, the vital signs as lights and
// the events as a table. Live, it polls the server for the lines
// appended since its last byte offset; in a report the lines are in the page (#smelt-data) and
// nothing is fetched. Plain script, no build step; it reads lines by the rules of
// src/smelt/obs/dashboard.hpp (DashboardMarks) so the page and /metrics agree.
(function () {
  'use strict';

  const RUN_COLORS = ['#2563eb', '#ea580c', '#16a34a', '#9333ea', '#0d9488', '#db2777', '#92400e', '#475569'];
  const DASHES = [[], [6, 4], [2, 3], [10, 3, 2, 3], [1, 5]];
  const MARK_COLORS = {
    checkpoint: '#64748b', skipped: '#d97706', loss_spike: '#ca8a04', rollback: '#dc2626',
    checkpoint_failed: '#b91c1c', lr_restart: '#7c3aed', restart: '#111827', launch_end: '#111827', time_budget_plan: '#0891b2',
    vital_sign: '#e11d48', spike_no_checkpoint: '#b45309',
  };
  const MARK_OTHER = '#94a3b8';
  const CHANCE_COLOR = '#6b7280';

  // The charts, in page order. A series reads one key of the step lines ("fetch_ms.p95" for a
  // nested field); sparse ones (a value every N steps) are drawn as points and never smoothed.
  // `prefix` makes one series per key under it (loss_by_source.NAME).
  const CHARTS = [
    {id: 'loss', title: 'Loss', unit: 'nats/token', hint: 'training loss per step; validation loss at each evaluation (points)',
      series: [{key: 'loss', label: 'train'}, {key: 'eval_loss', label: 'validation', sparse: true}]},
    {id: 'lr', title: 'Learning rate', hint: 'the schedule as applied', series: [{key: 'lr', label: 'lr'}]},
    {id: 'grad_norm', title: 'Gradient norm', hint: 'global L2 norm before clipping',
      series: [{key: 'grad_norm', label: 'norm'}]},
    {id: 'grad_norm_ratio', title: 'Gradient norm ratio', hint: "this step's norm over the step before's",
      series: [{key: 'grad_norm_ratio', label: 'ratio'}]},
    {id: 'tokens_per_s', title: 'Throughput', unit: 'tokens/s', hint: 'training tokens per second (all ranks)',
      series: [{key: 'tokens_per_s', label: 'tokens/s'}]},
    {id: 'mfu', title: 'MFU', unit: '%', scale: 100,
      hint: "model FLOPs utilisation against the model's measured GEMM rate (solid) and the CPU's peak (dashed)",
      series: [{key: 'mfu', label: 'of GEMM rate'}, {key: 'mfu_peak', label: 'of peak'}]},
    {id: 'data', title: 'Data', unit: 'ms', hint: "time each step waited for its batch; the loader's fetch latency percentiles",
      series: [{key: 'data_wait_ms', label: 'wait'}, {key: 'fetch_ms.p50', label: 'fetch p50'},
        {key: 'fetch_ms.p95', label: 'fetch p95'}, {key: 'fetch_ms.p99', label: 'fetch p99'}]},
    {id: 'allreduce', title: 'All-reduce', unit: 'ms', hint: 'time each step waited in the gradient reduction, and its total',
      series: [{key: 'allreduce_wait_ms', label: 'wait'}, {key: 'allreduce_ms', label: 'total'}]},
    {id: 'ckpt', title: 'Checkpoint write', unit: 'MB/s', hint: "write rate of each checkpoint (async: reported at the next save), and the disk's own rate measured at the start",
      series: [{key: 'ckpt_write_mb_s', label: 'MB/s', sparse: true}, {key: 'disk_mb_s', label: 'disk at start', sparse: true}]},
    {id: 'entropy', title: 'Token entropy', unit: 'nats', hint: "mean entropy of the next-token distribution; validation's at each evaluation",
      series: [{key: 'token_entropy', label: 'train'}, {key: 'eval_entropy', label: 'validation', sparse: true}]},
    {id: 'attn_sparsity', title: 'Attention sparsity', hint: 'share of attention weights below the threshold (sampled)',
      series: [{key: 'attn_sparsity', label: 'sparsity', sparse: true}]},
    {id: 'loss_by_source', title: 'Loss by data source', unit: 'nats/token', hint: 'training loss of each source in the blend',
      prefix: 'loss_by_source.'},
  ];
  // After these, one chart per downstream task (taskCharts): the "tasks" field of evaluation lines,
  // {"NAME": {"metric", "value", "stderr", "chance", "items"}}, read as the columns
  // tasks.NAME.value and tasks.NAME.stderr, the metric and chance kept in run.tasks.

  // The latest table's rows: the last step line's step, then each key's value in the last step
  // line that holds it.
  const LATEST = [
    ['loss', 'loss'], ['eval_loss', 'validation loss'], ['eval_bpb', 'validation bits/byte'], ['lr', 'learning rate'],
    ['grad_norm', 'grad norm'], ['grad_norm_ratio', 'grad norm ratio'], ['tokens_per_s', 'tokens/s'], ['mfu', 'MFU (GEMM rate)'],
    ['mfu_peak', 'MFU (peak)'], ['step_ms', 'step ms'], ['data_wait_ms', 'data wait ms'], ['fetch_ms.p95', 'fetch p95 ms'],
    ['allreduce_wait_ms', 'all-reduce wait ms'], ['ckpt_write_mb_s', 'checkpoint MB/s'], ['token_entropy', 'token entropy'],
    ['attn_sparsity', 'attention sparsity'], ['tokens', 'tokens'],
  ];
  const MAX_EVENT_ROWS = 300;

  const $ = (id) => document.getElementById(id);
  const el = (tag, attrs, ...kids) => {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (k === 'class') e.className = v;
      else if (k === 'style') e.style.cssText = v;
      else if (k.startsWith('data-')) e.setAttribute(k, String(v));
      else e[k] = v;
    }
    for (const k of kids) if (k !== null && k !== undefined) e.append(k);
    return e;
  };

  // ---- one run's lines ----------------------------------------------------------------------

  function newRun(id, name, dir) {
    return {id, name, dir, color: RUN_COLORS[id % RUN_COLORS.length], steps: [], cols: {}, events: [], lines: 0, bad: 0,
      prevStall: false, offset: 0, file: '', compare: null, vitals: null, vitalsError: '', tasks: {}};
  }

  function clearRun(r) {
    r.steps = []; r.cols = {}; r.events = []; r.lines = 0; r.bad = 0; r.prevStall = false; r.tasks = {};
  }

  const taskKey = (name, field) => `tasks.${name}.${field}`;
  const isObject = (v) => v !== null && typeof v === 'object' && !Array.isArray(v);
  const numOrNull = (v) => (typeof v === 'number' ? v : null);

  // A line's tasks: their value and stderr into out (as columns), their metric and chance into r.tasks.
  function flattenTasks(r, tasks, out) {
    for (const [name, t] of Object.entries(tasks)) {
      if (!isObject(t)) continue;
      out[taskKey(name, 'value')] = numOrNull(t.value);
      out[taskKey(name, 'stderr')] = numOrNull(t.stderr);
      r.tasks[name] = {metric: typeof t.metric === 'string' ? t.metric : 'value', chance: numOrNull(t.chance)};
    }
  }

  function flatten(r, line) {
    const out = {};
    for (const [k, v] of Object.entries(line)) {
      if (k === 'step' || k === 'event') continue;
      if (k === 'tasks' && isObject(v)) flattenTasks(r, v, out);
      else if (v === null || typeof v === 'number') out[k] = v;
      else if (v && typeof v === 'object' && !Array.isArray(v))
        for (const [k2, v2] of Object.entries(v)) if (v2 === null || typeof v2 === 'number') out[k + '.' + k2] = v2;
    }
    return out;
  }

  function eventDetail(kind, line) {
    switch (kind) {
      case 'rollback': return `rolled back to step ${line.to_step}; ${line.documents ?? 0} documents quarantined`;
      case 'lr_restart': return `learning rate restarted at peak ${fmtNum(line.peak_lr)}`;
      case 'checkpoint_failed': return String(line.error ?? '');
      case 'time_budget_plan': return `${line.total_steps} steps planned at ${fmtNum(line.step_ms)} ms a step`;
      case 'checkpoint': return line.ckpt_stall_ms !== undefined ? `saved; the step stalled ${fmtNum(line.ckpt_stall_ms)} ms` : 'saved';
      case 'skipped': return 'non-finite loss or gradient: the update was skipped';
      case 'loss_spike': return `loss spike (${line.loss_spike} in a row)`;
      case 'restart': return line && line.cause !== undefined
        ? `smelt launch restarted it (${line.cause}${line.rank != null ? ', rank ' + line.rank : ''}${line.host ? ', host ' + line.host : ''}): `
          + `${line.steps_lost} steps and ${fmtNum(line.lost_s)} s lost, resumed from step ${line.step}`
        : 'the run was resumed: the steps from here were written again';
      case 'launch_end': return `smelt launch ended (${line.outcome}): ${line.restarts} restarts, goodput ${fmtNum(line.goodput)} of ${fmtNum(line.wall_s)} s`;
      case 'vital_sign': return `${line.sign}: ${line.state} since step ${line.since}${line.detail ? ' (' + line.detail + ')' : ''}`;
      case 'spike_no_checkpoint': return 'loss spikes in a row, but no checkpoint to roll back to';
      default: {
        const rest = Object.assign({}, line);
        delete rest.step; delete rest.event;
        const t = JSON.stringify(rest);
        return t === '{}' ? '' : t;
      }
    }
  }

  // The same rules as DashboardMarks::next (src/smelt/obs/dashboard.cpp).
  function marksOf(r, line) {
    if ('event' in line) return [typeof line.event === 'string' ? line.event : 'event'];
    const marks = [];
    const stall = 'ckpt_stall_ms' in line;
    if ('ckpt_write_mb_s' in line || (stall && !r.prevStall)) marks.push('checkpoint');
    if ('skipped' in line) marks.push('skipped');
    if ('loss_spike' in line) marks.push('loss_spike');
    r.prevStall = stall;
    return marks;
  }

  // The first index whose step is >= s (steps ascend).
  function lowerBound(a, s) {
    let lo = 0, hi = a.length;
    while (lo < hi) { const m = (lo + hi) >> 1; if (a[m] < s) lo = m + 1; else hi = m; }
    return lo;
  }

  // A step line whose step is not above the last one's: the run started again from there
  // (the later lines replace the earlier ones from that step on).
  function restartAt(r, s) {
    const n = lowerBound(r.steps, s);
    r.steps.length = n;
    for (const c of Object.values(r.cols)) c.length = n;
    r.events = r.events.filter((e) => e.step < s);
    r.events.push({step: s, kind: 'restart', detail: eventDetail('restart')});
  }

  function ingest(r, lines) {
    for (const line of lines) {
      r.lines++;
      const s = line.step;
      const isEvent = 'event' in line;
      if (!isEvent && r.steps.length && s <= r.steps[r.steps.length - 1]) restartAt(r, s);
      for (const kind of marksOf(r, line)) r.events.push({step: s, kind, detail: eventDetail(kind, line)});
      if (isEvent) continue;
      const row = r.steps.length;
      r.steps.push(s);
      const vals = flatten(r, line);
      for (const [k, v] of Object.entries(vals)) {
        if (!(k in r.cols)) r.cols[k] = new Array(row);  // (holes read as undefined: absent)
        r.cols[k][row] = v;
      }
      for (const c of Object.values(r.cols)) if (c.length < row + 1) c.length = row + 1;
      // After a reset: the first step line that differs from the file read before is where the
      // resumed run's own lines begin (lines up to its checkpoint are copies, with equal timings).
      if (r.compare) {
        const old = r.compare;
        if (row >= old.steps.length) r.compare = null;
        else if (old.steps[row] !== s || old.ms[row] !== vals.step_ms) {
          r.events.push({step: s, kind: 'restart', detail: eventDetail('restart')});
          r.compare = null;
        }
      }
    }
  }

  // The value of key in the last step line that holds it: {v, step} or null.
  function latestOf(r, key) {
    const c = r.cols[key];
    if (!c) return null;
    for (let i = c.length - 1; i >= 0; i--) if (c[i] !== undefined) return {v: c[i], step: r.steps[i]};
    return null;
  }

  // ---- numbers ------------------------------------------------------------------------------

  function fmtNum(v, key) {
    if (v === null || v === undefined || Number.isNaN(v)) return '—';
    if (key === 'mfu' || key === 'mfu_peak') return Number((v * 100).toPrecision(3)) + '%';
    const a = Math.abs(v);
    if (Number.isInteger(v) && a >= 1000) return v.toLocaleString('en-US');
    if (a !== 0 && (a < 1e-3 || a >= 1e6)) return v.toExponential(3);
    return String(Number(v.toPrecision(4)));
  }

  function axisNum(v) {
    if (v === null) return '';
    const a = Math.abs(v);
    if (a === 0) return '0';
    if (a < 1e-3 || a >= 1e6) return v.toExponential(1);
    if (a >= 1000) return Number(v.toPrecision(3)).toLocaleString('en-US');
    return String(Number(v.toPrecision(3)));
  }

  // Debiased exponential moving average (the first values are not pulled toward zero).
  function ema(values, alpha) {
    if (!(alpha > 0)) return values;
    const out = new Array(values.length);
    let s = 0, n = 0;
    for (let i = 0; i < values.length; i++) {
      const v = values[i];
      if (v === null || v === undefined || !Number.isFinite(v)) { out[i] = null; continue; }
      s = alpha * s + (1 - alpha) * v;
      n++;
      out[i] = s / (1 - Math.pow(alpha, n));
    }
    return out;
  }

  // ---- state and rendering ------------------------------------------------------------------

  const state = {runs: [], mode: 'live', title: '', logScale: false, smoothing: 0, charts: {}, hiddenKinds: new Set(),
    renders: 0, vitalsEnabled: false};

  // Series a chart draws: one per run and key that has a value.
  function chartSeries(def) {
    const out = [];
    for (const r of state.runs) {
      let subs = def.series || [];
      if (def.prefix)
        subs = Object.keys(r.cols).filter((k) => k.startsWith(def.prefix)).sort()
          .map((k) => ({key: k, label: k.slice(def.prefix.length)}));
      subs.forEach((sub, j) => {
        const c = r.cols[sub.key];
        let values = 0;
        if (c) for (const v of c) if (v !== undefined && v !== null) values++;
        if (!values) return;
        out.push({run: r, key: sub.key, err: sub.err, label: sub.label, sparse: !!sub.sparse, values,
          dash: DASHES[j % DASHES.length]});
      });
    }
    return out;
  }

  // The x values every chart shares: the union of the runs' steps (and where each step sits).
  function stepAxis() {
    const withSteps = state.runs.filter((r) => r.steps.length);
    if (withSteps.length <= 1) return {xs: withSteps.length ? withSteps[0].steps.slice() : [], index: null};
    const set = new Set();
    for (const r of withSteps) for (const s of r.steps) set.add(s);
    const xs = [...set].sort((a, b) => a - b);
    return {xs, index: new Map(xs.map((x, i) => [x, i]))};
  }

  // A run's column as y values, one per step line: null where absent or not finite, scaled.
  function columnValues(r, key, scale) {
    const c = r.cols[key] || [];
    const ys = new Array(r.steps.length);
    for (let i = 0; i < ys.length; i++) {
      const v = c[i];
      ys[i] = v === undefined || v === null || !Number.isFinite(v) ? null : scale ? v * scale : v;
    }
    return ys;
  }

  // A run's y values laid on the shared x values.
  function alignTo(axis, r, ys) {
    if (!axis.index) return ys;
    const al = new Array(axis.xs.length).fill(null);
    r.steps.forEach((st, i) => { al[axis.index.get(st)] = ys[i]; });
    return al;
  }

  // A chart's data: the shared x values, then each series aligned to them.
  function chartData(def, series, axis) {
    const data = [axis.xs];
    for (const s of series) {
      let ys = columnValues(s.run, s.key, def.scale);
      if (!s.sparse) ys = ema(ys, state.smoothing);
      if (state.logScale) ys = ys.map((v) => (v !== null && v > 0 ? v : null));
      data.push(alignTo(axis, s.run, ys));
    }
    return data;
  }

  // The standard errors of the series that have them (task charts), laid out as chartData lays
  // out their values; null for the others.
  function chartErrors(series, axis) {
    return series.map((s) => (s.err ? alignTo(axis, s.run, columnValues(s.run, s.err)) : null));
  }

  // Events as dashed vertical lines over the plot, a small triangle on top (uPlot draw hook).
  function marksPlugin() {
    return {
      hooks: {
        draw: [(u) => {
          const ctx = u.ctx, {left, top, width, height} = u.bbox;
          const lo = u.scales.x.min, hi = u.scales.x.max;
          if (lo === null || hi === null) return;
          ctx.save();
          ctx.beginPath();
          ctx.rect(left, top, width, height);
          ctx.clip();
          ctx.lineWidth = Math.max(1, devicePixelRatio);
          for (const r of state.runs) {
            for (const e of r.events) {
              if (state.hiddenKinds.has(e.kind) || e.step < lo || e.step > hi) continue;
              const x = Math.round(u.valToPos(e.step, 'x', true)) + 0.5;
              const color = MARK_COLORS[e.kind] || MARK_OTHER;
              ctx.strokeStyle = color;
              ctx.globalAlpha = 0.55;
              ctx.setLineDash([4 * devicePixelRatio, 3 * devicePixelRatio]);
              ctx.beginPath();
              ctx.moveTo(x, top);
              ctx.lineTo(x, top + height);
              ctx.stroke();
              ctx.globalAlpha = 0.9;
              ctx.setLineDash([]);
              ctx.fillStyle = color;
              const t = 4 * devicePixelRatio;
              ctx.beginPath();
              ctx.moveTo(x - t, top);
              ctx.lineTo(x + t, top);
              ctx.lineTo(x, top + 1.6 * t);
              ctx.closePath();
              ctx.fill();
            }
          }
          ctx.restore();
        }],
      },
    };
  }

  // ---- downstream tasks ---------------------------------------------------------------------

  // One chart per task any run holds, in the order the runs first show them; the metric and
  // chance level are those of the first run that has the task.
  function taskCharts() {
    const seen = new Map();
    for (const r of state.runs) for (const [name, t] of Object.entries(r.tasks)) if (!seen.has(name)) seen.set(name, t);
    return [...seen].map(([name, t]) => ({
      id: 'task:' + name, task: name, metric: t.metric, chance: t.chance, title: `${name}: ${t.metric}`,
      hint: `downstream task at each evaluation, bars: ± one standard error` +
        (t.chance === null ? '' : `; dashed: chance (${fmtNum(t.chance)})`),
      series: [{key: taskKey(name, 'value'), err: taskKey(name, 'stderr'), label: t.metric, sparse: true}],
    }));
  }

  // A task chart's y range: its values with their error bars and the chance level, padded.
  function taskRange(c, u, dmin, dmax) {
    let lo = dmin, hi = dmax;
    const take = (v) => {
      if (v === null || !Number.isFinite(v) || (state.logScale && v <= 0)) return;
      lo = lo === null ? v : Math.min(lo, v);
      hi = hi === null ? v : Math.max(hi, v);
    };
    c.errs.forEach((errs, k) => {
      if (errs) u.data[k + 1].forEach((v, i) => { if (v !== null && errs[i] > 0) { take(v - errs[i]); take(v + errs[i]); } });
    });
    if (c.def.chance !== null) take(c.def.chance);
    if (lo === null) return [0, 1];
    if (state.logScale) return uPlot.rangeLog(lo, hi, 10, true);
    const pad = (hi - lo) * 0.08 || Math.abs(hi) * 0.05 || 0.05;
    return [lo - pad, hi + pad];
  }

  // Each point's error bar (value ± stderr) in its run's colour; returns how many were drawn.
  function drawErrorBars(u, c) {
    const ctx = u.ctx, cap = 3 * devicePixelRatio;
    let bars = 0;
    ctx.lineWidth = Math.max(1, 1.2 * devicePixelRatio);
    c.errs.forEach((errs, k) => {
      if (!errs || !u.series[k + 1].show) return;
      ctx.strokeStyle = c.series[k].run.color;
      u.data[k + 1].forEach((v, i) => {
        const e = errs[i];
        if (v === null || e === null || !(e > 0)) return;
        const x = u.valToPos(u.data[0][i], 'x', true);
        const y0 = u.valToPos(state.logScale && v - e <= 0 ? u.scales.y.min : v - e, 'y', true);
        const y1 = u.valToPos(v + e, 'y', true);
        ctx.beginPath();
        ctx.moveTo(x, y0); ctx.lineTo(x, y1);
        ctx.moveTo(x - cap, y0); ctx.lineTo(x + cap, y0);
        ctx.moveTo(x - cap, y1); ctx.lineTo(x + cap, y1);
        ctx.stroke();
        bars++;
      });
    });
    return bars;
  }

  // The chance level as a dashed line across the plot, labelled; returns its canvas row (null:
  // outside the plot).
  function drawChance(u, chance) {
    const {left, top, width, height} = u.bbox;
    if (state.logScale && chance <= 0) return null;
    const y = Math.round(u.valToPos(chance, 'y', true));
    if (y < top || y > top + height) return null;
    const ctx = u.ctx, px = devicePixelRatio;
    ctx.strokeStyle = CHANCE_COLOR;
    ctx.fillStyle = CHANCE_COLOR;
    ctx.lineWidth = 2 * px;  // (at a whole row: the rows y-1 and y, crisp)
    ctx.setLineDash([6 * px, 4 * px]);
    ctx.beginPath();
    ctx.moveTo(left, y);
    ctx.lineTo(left + width, y);
    ctx.stroke();
    ctx.setLineDash([]);
    ctx.font = `${11 * px}px sans-serif`;
    ctx.textAlign = 'right';
    ctx.fillText(`chance ${fmtNum(chance)}`, left + width - 4 * px, y - 5 * px);
    return y;
  }

  // A task chart's extras over its points; what was drawn goes into the section's data attributes
  // (error-bars, chance-drawn, chance-y: the canvas row) for tests.
  function taskPlugin(def) {
    return {
      hooks: {
        draw: [(u) => {
          const c = state.charts[def.id];
          if (!c) return;
          const {left, top, width, height} = u.bbox;
          u.ctx.save();
          u.ctx.beginPath();
          u.ctx.rect(left, top, width, height);
          u.ctx.clip();
          const bars = drawErrorBars(u, c);
          const y = c.def.chance === null ? null : drawChance(u, c.def.chance);
          u.ctx.restore();
          c.sec.dataset.errorBars = String(bars);
          c.sec.dataset.chanceDrawn = y === null ? 'false' : 'true';
          c.sec.dataset.chanceY = y === null ? '' : String(y);
        }],
      },
    };
  }

  function chartWidth(box) { return Math.max(280, Math.floor(box.clientWidth)); }

  function makeChart(def, box, series, data) {
    const multi = state.runs.length > 1;
    const c = state.charts[def.id];
    const isTask = def.task !== undefined;
    const yScale = state.logScale ? {distr: 3, log: 10} : {};
    if (isTask) yScale.range = (u, lo, hi) => taskRange(c, u, lo, hi);
    // a task's legend shows the value ± its standard error
    const valueText = (s, k) => (u, v, si, i) => {
      if (v === null) return '—';
      const t = fmtNum(def.scale ? v / def.scale : v, def.scale ? 'mfu' : s.key);
      const e = isTask && c.errs[k] && i !== null && i !== undefined ? c.errs[k][i] : null;
      return e === null ? t : `${t} ± ${fmtNum(e)}`;
    };
    const opts = {
      width: chartWidth(box),
      height: 240,
      cursor: {sync: {key: 'smelt'}, drag: {x: true, y: false}},
      scales: {x: {time: false}, y: yScale},
      axes: [
        {label: 'step', values: (u, vals) => vals.map(axisNum), size: 40, labelSize: 18},
        {label: def.unit || '', values: (u, vals) => vals.map(axisNum), size: 56, labelSize: def.unit ? 18 : 0},
      ],
      series: [{label: 'step', value: (u, v) => (v === null ? '—' : String(v))}].concat(series.map((s, k) => ({
        label: multi ? `${s.run.name} ${s.label}` : s.label,
        stroke: s.run.color,
        width: 1.6,
        dash: s.dash,
        spanGaps: true,
        // a dense curve with one value so far has no line to draw: show its points then
        points: s.sparse || s.values < 2 ? {show: true, size: 7, fill: s.run.color} : {show: false},
        value: valueText(s, k),
      }))),
      legend: {show: true, live: true},
      plugins: isTask ? [marksPlugin(), taskPlugin(def)] : [marksPlugin()],
      hooks: {
        setScale: [(u, key) => {
          if (key !== 'x') return;
          const xs = u.data[0];
          const c = state.charts[def.id];
          if (c && xs.length) c.zoomed = u.scales.x.min > xs[0] || u.scales.x.max < xs[xs.length - 1];
        }],
      },
    };
    return new uPlot(opts, data, box);
  }

  function seriesSignature(series) {
    return JSON.stringify([state.logScale, series.map((s) => [s.run.id, s.key, s.sparse || s.values < 2])]);
  }

  // A chart's section, placed in page order: task charts after the loss chart, in the order they appear.
  function chartSection(def) {
    const box = el('div', {class: 'plot'}), title = el('h3', {}, def.title), hint = el('p', {class: 'hint'}, def.hint || '');
    const isTask = def.task !== undefined;
    const id = isTask ? `chart-task-${Object.values(state.charts).filter((c) => c.isTask).length}` : 'chart-' + def.id;
    const sec = el('section', {class: 'chart', id, 'data-chart': def.id, 'data-has-data': 'false'}, title, hint, box);
    if (!isTask) $('charts').append(sec);
    else {
      const tasks = Object.values(state.charts).filter((c) => c.isTask);
      (tasks.length ? tasks[tasks.length - 1].sec : state.charts.loss.sec).after(sec);
    }
    return {sec, box, title, hint, isTask, def, plot: null, sig: '', zoomed: false, series: [], errs: []};
  }

  // A task chart's title, hint and the facts tests read (the metric, the chance level or '').
  function labelTaskChart(c, def) {
    c.title.textContent = def.title;
    c.hint.textContent = def.hint;
    c.sec.dataset.task = def.task;
    c.sec.dataset.metric = def.metric;
    c.sec.dataset.chance = def.chance === null ? '' : String(def.chance);
  }

  function renderCharts() {
    const absent = [];
    const axis = stepAxis();
    for (const def of CHARTS.concat(taskCharts())) {
      const c = state.charts[def.id] || (state.charts[def.id] = chartSection(def));
      if (c.isTask) labelTaskChart(c, def);
      const series = chartSeries(def);
      c.sec.dataset.hasData = series.length ? 'true' : 'false';
      c.sec.dataset.series = String(series.length);
      c.sec.dataset.values = String(series.reduce((n, s) => n + s.values, 0));
      if (!series.length) {
        if (c.plot) { c.plot.destroy(); c.plot = null; c.sig = ''; }
        absent.push(def.title);
        continue;
      }
      const data = chartData(def, series, axis);
      Object.assign(c, {def, series, errs: chartErrors(series, axis)});
      const sig = seriesSignature(series);
      if (c.plot && c.sig === sig) c.plot.setData(data, !c.zoomed);
      else {
        if (c.plot) c.plot.destroy();
        c.plot = makeChart(def, c.box, series, data);
        c.sig = sig;
        c.zoomed = false;
      }
      c.sec.dataset.points = String(data[0].length);
    }
    $('absent').textContent = absent.length ? `Not recorded in these runs' metrics: ${absent.join(', ')}.` : '';
  }

  function renderRuns() {
    const box = $('runs');
    box.replaceChildren();
    for (const r of state.runs) {
      const last = r.steps.length ? r.steps[r.steps.length - 1] : null;
      box.append(el('div', {class: 'run', 'data-run': r.id, 'data-lines': r.lines, 'data-bad-lines': r.bad,
        'data-last-step': last ?? ''},
      el('span', {class: 'swatch', style: `background:${r.color}`}), el('strong', {}, r.name),
      el('span', {class: 'dir'}, r.dir),
      el('span', {class: 'facts'}, last === null ? 'no steps yet' : `step ${last.toLocaleString('en-US')} · ${r.lines} lines`),
      r.bad ? el('span', {class: 'facts bad'}, `${r.bad} line${r.bad === 1 ? '' : 's'} skipped (not JSON)`) : null));
    }
  }

  function renderLatest() {
    const t = $('latest');
    const head = el('tr', {}, el('th', {}, ''));
    for (const r of state.runs)
      head.append(el('th', {}, el('span', {class: 'swatch', style: `background:${r.color};margin-right:6px`}), r.name));
    const body = el('tbody');
    const stepRow = el('tr', {'data-key': 'step'}, el('td', {class: 'label'}, 'step'));
    for (const r of state.runs) {
      const s = r.steps.length ? r.steps[r.steps.length - 1] : null;
      stepRow.append(el('td', {'data-run': r.id, 'data-key': 'step', 'data-value': s === null ? 'null' : s,
        'data-step': s === null ? '' : s}, s === null ? '—' : s.toLocaleString('en-US')));
    }
    body.append(stepRow);
    const taskRows = taskCharts().map((d) => [taskKey(d.task, 'value'), `${d.task} (${d.metric})`]);
    for (const [key, label] of LATEST.concat(taskRows)) {
      const vals = state.runs.map((r) => latestOf(r, key));
      if (vals.every((v) => v === null)) continue;
      const tr = el('tr', {'data-key': key}, el('td', {class: 'label'}, label));
      state.runs.forEach((r, i) => {
        const lv = vals[i];
        const last = r.steps.length ? r.steps[r.steps.length - 1] : null;
        if (!lv) { tr.append(el('td', {'data-run': r.id, 'data-key': key, 'data-value': 'absent'}, '—')); return; }
        tr.append(el('td', {'data-run': r.id, 'data-key': key, 'data-value': lv.v === null ? 'null' : String(lv.v),
          'data-step': lv.step}, fmtNum(lv.v, key), lv.step !== last ? el('span', {class: 'at'}, `@${lv.step}`) : null));
      });
      body.append(tr);
    }
    t.replaceChildren(el('thead', {}, head), body);
  }

  function renderVitals() {
    const box = $('vitals');
    box.replaceChildren();
    for (const r of state.runs) {
      const v = r.vitals;
      const head = el('h3', {}, el('span', {class: 'swatch', style: `background:${r.color}`}), r.name);
      const card = el('div', {class: 'vitals-run', 'data-run': r.id}, head);
      if (!v || !Array.isArray(v.signs)) {
        card.dataset.state = 'none';
        card.append(el('div', {class: 'note'}, r.vitalsError || 'no vital signs for this run'));
        box.append(card);
        continue;
      }
      card.dataset.state = v.state;
      head.append(el('span', {class: 'state-word ' + v.state}, v.state));
      const lights = el('div', {class: 'lights'});
      for (const s of v.signs) {
        const value = s.state === 'unknown' || s.value === null || s.value === undefined || Number.isNaN(s.value) ? '—'
          : `${fmtNum(s.value)}${s.unit ? ' ' + s.unit : ''}`;
        const since = s.since >= 0 && s.state !== 'ok'
          ? `since step ${s.since}${s.now && s.now !== s.state ? `, ${s.now} now` : ''}`
          : s.state === 'unknown' ? 'nothing to judge yet' : '';
        lights.append(el('div', {class: 'light', 'data-run': r.id, 'data-sign': s.name, 'data-state': s.state,
          'data-now': s.now || '', 'data-value': s.value ?? 'null', 'data-since': s.since ?? -1, title: s.detail || ''},
        el('span', {class: 'dot'}), el('span', {}, el('span', {class: 'name'}, s.label || s.name), ' ',
          el('span', {class: 'value'}, value)),
        el('span', {class: 'band'}, s.band || ''), since ? el('span', {class: 'since'}, since) : null));
      }
      card.append(lights);
      const tasks = taskLines(r, v);
      if (tasks) card.append(tasks);
      box.append(card);
    }
  }

  // The downstream tasks as `smelt health` sums them up (VitalsReport's "tasks" and "warnings").
  function taskLines(r, v) {
    const box = el('div', {class: 'tasks'});
    const tasks = v.tasks && typeof v.tasks === 'object' ? Object.entries(v.tasks) : [];
    for (const [name, t] of tasks) {
      const err = t.last_stderr === null ? '' : ` (± ${fmtNum(t.last_stderr)})`;
      const chance = t.chance === null ? '' : `, chance ${fmtNum(t.chance)}`;
      box.append(el('div', {class: 'task', 'data-run': r.id, 'data-task': name, 'data-regressed': !!t.regressed},
        el('span', {class: 'name'}, name), ` ${t.metric} ${fmtNum(t.first)} → ${fmtNum(t.last)}${err} over ` +
        `${t.evaluations} evaluation${t.evaluations === 1 ? '' : 's'}${chance}`));
    }
    for (const w of v.warnings || []) box.append(el('div', {class: 'task-warning', 'data-run': r.id}, w));
    return tasks.length ? box : null;
  }

  function renderEvents() {
    const all = [];
    const kinds = new Set();
    for (const r of state.runs) for (const e of r.events) { all.push({r, e}); kinds.add(e.kind); }
    all.sort((a, b) => b.e.step - a.e.step || a.r.id - b.r.id);
    const kbox = $('mark-kinds');
    kbox.replaceChildren();
    for (const k of [...kinds].sort()) {
      const cb = el('input', {type: 'checkbox', checked: !state.hiddenKinds.has(k)});
      cb.addEventListener('change', () => {
        if (cb.checked) state.hiddenKinds.delete(k); else state.hiddenKinds.add(k);
        for (const c of Object.values(state.charts)) if (c.plot) c.plot.redraw(false, false);
      });
      kbox.append(el('label', {'data-kind': k}, cb,
        el('span', {class: 'kind-line', style: `border-color:${MARK_COLORS[k] || MARK_OTHER}`}), k.replace(/_/g, ' ')));
    }
    const t = $('events');
    const body = el('tbody');
    for (const {r, e} of all.slice(0, MAX_EVENT_ROWS))
      body.append(el('tr', {'data-run': r.id, 'data-kind': e.kind, 'data-step': e.step},
        el('td', {}, String(e.step)), el('td', {}, el('span', {class: 'swatch', style: `background:${r.color};margin-right:6px`}), r.name),
        el('td', {}, el('span', {class: 'kind-line', style: `border-color:${MARK_COLORS[e.kind] || MARK_OTHER};margin-right:6px`}),
          e.kind.replace(/_/g, ' ')),
        el('td', {class: 'detail'}, e.detail)));
    if (all.length > MAX_EVENT_ROWS)
      body.append(el('tr', {class: 'more'}, el('td', {colSpan: 4}, `${all.length - MAX_EVENT_ROWS} earlier events not listed`)));
    if (!all.length) body.append(el('tr', {}, el('td', {colSpan: 4, class: 'detail'}, 'none yet')));
    t.replaceChildren(el('thead', {}, el('tr', {}, el('th', {}, 'step'), el('th', {}, 'run'), el('th', {}, 'event'),
      el('th', {}, 'detail'))), body);
    t.dataset.count = String(all.length);
  }

  function render() {
    renderRuns();
    renderLatest();
    renderVitals();
    renderCharts();
    renderEvents();
    state.renders++;
    document.body.dataset.renders = String(state.renders);
    document.body.dataset.ready = 'true';
  }

  function setStatus(text, error) {
    const s = $('status');
    s.textContent = text;
    s.classList.toggle('error', !!error);
  }

  // ---- controls -----------------------------------------------------------------------------

  function wireControls() {
    const log = $('log-scale'), sm = $('smoothing'), out = $('smoothing-value');
    log.addEventListener('change', () => {
      state.logScale = log.checked;
      for (const c of Object.values(state.charts)) c.sig = '';  // the scale type changes: build again
      renderCharts();
    });
    let pending = false;
    sm.addEventListener('input', () => {
      state.smoothing = Number(sm.value);
      out.textContent = sm.value;
      if (pending) return;
      pending = true;
      requestAnimationFrame(() => { pending = false; renderCharts(); });
    });
    let resize = 0;
    window.addEventListener('resize', () => {
      clearTimeout(resize);
      resize = setTimeout(() => {
        for (const c of Object.values(state.charts)) if (c.plot) c.plot.setSize({width: chartWidth(c.box), height: 240});
      }, 100);
    });
  }

  // ---- live: poll the server ----------------------------------------------------------------

  async function getJson(url) {
    const res = await fetch(url, {cache: 'no-store'});
    if (!res.ok) {
      let msg = `${res.status}`;
      try { msg += ': ' + (await res.json()).error; } catch (e) { /* not JSON */ }
      const err = new Error(`${url}: ${msg}`);
      err.status = res.status;
      throw err;
    }
    return res.json();
  }

  // Reads what run r's metrics.jsonl gained since r.offset; true when anything changed.
  async function pollRun(r) {
    let changed = false;
    for (let round = 0; round < 256; round++) {
      const c = await getJson(`api/runs/${r.id}/metrics?from=${r.offset}&file=${encodeURIComponent(r.file)}`);
      if (c.reset && (r.offset > 0 || r.lines > 0)) {
        // The file was rewritten (a resume truncates it to its checkpoint): read it all again,
        // and mark where its lines start to differ from those read before.
        r.compare = {steps: r.steps.slice(), ms: (r.cols.step_ms || []).slice()};
        clearRun(r);
        changed = true;
      }
      r.file = c.file;
      if (c.lines.length || c.bad_lines) {
        ingest(r, c.lines);
        r.bad += c.bad_lines;
        r.lines += c.bad_lines;
        changed = true;
      }
      r.offset = c.next;
      if (!c.more || c.next === c.from) break;
    }
    return changed;
  }

  async function pollVitals(r) {
    try {
      r.vitals = await getJson(`api/runs/${r.id}/vitals`);
      r.vitalsError = '';
    } catch (e) {
      r.vitals = null;
      r.vitalsError = e.status === 404 ? 'no vital signs from this server' : String(e.message || e);
    }
  }

  async function live() {
    const info = await getJson('api/runs');
    state.title = info.title;
    state.vitalsEnabled = !!info.vitals;
    state.runs = info.runs.map((x) => newRun(x.id, x.name, x.dir));
    const refresh = Math.max(250, info.refresh_ms || 1500);
    // The vital signs are judged over the whole file: asked for after new lines, at most every 5 s.
    const vitalsEvery = Math.max(refresh, 5000);
    let lastVitals = 0, vitalsStale = true;
    if (!state.vitalsEnabled) for (const r of state.runs) r.vitalsError = 'no vital signs from this server';
    document.title = state.title;
    $('title').textContent = state.title;
    const tick = async () => {
      try {
        const changed = await Promise.all(state.runs.map(pollRun));
        let any = changed.some(Boolean);
        vitalsStale = vitalsStale || any;
        if (state.vitalsEnabled && vitalsStale && Date.now() - lastVitals >= vitalsEvery) {
          lastVitals = Date.now();
          vitalsStale = false;
          await Promise.all(state.runs.map(pollVitals));
          any = true;
        }
        if (any || state.renders === 0) render();
        document.body.dataset.polls = String(Number(document.body.dataset.polls || 0) + 1);
        setStatus(`live · refreshed ${new Date().toLocaleTimeString()} · every ${refresh / 1000} s`);
      } catch (e) {
        setStatus(`cannot read from the dashboard server (${e.message || e}); retrying`, true);
      }
      setTimeout(tick, refresh);
    };
    tick();
  }

  // ---- report: the data is in the page ------------------------------------------------------

  function report(data) {
    state.mode = 'report';
    state.title = data.title;
    document.title = data.title;
    $('title').textContent = data.title;
    state.runs = data.runs.map((x, i) => {
      const r = newRun(i, x.name, x.dir);
      ingest(r, x.lines);
      r.bad = x.bad_lines || 0;
      r.lines += r.bad;
      r.vitals = x.vitals || null;
      return r;
    });
    render();
    setStatus(`report written ${data.generated} · ${state.runs.length} run${state.runs.length === 1 ? '' : 's'}`);
  }

  function main() {
    wireControls();
    const embedded = document.getElementById('smelt-data');
    document.body.dataset.mode = embedded ? 'report' : 'live';
    if (embedded) report(JSON.parse(embedded.textContent));
    else live().catch((e) => setStatus(`cannot start: ${e.message || e}`, true));
  }

  main();
})();
