// airig operator console: the Report page (issue 40 §2), mounted by app.js as #report.
//
// It asks the brain's GET /v1/report (the same answer `report --json` prints, less the
// host's tune and update lines, which the brain never sees) and plots it per day or week
// with Plotly, the charting library the brain serves from its installed `plotly` package
// (/dashboard/plotly.min.js, loaded only when this page opens: 4.6 MB the other pages do
// not need). Nothing is fetched from the internet.
//
// Model names and alert kinds were written by plans and workers: in a plot they are given
// to Plotly with &, < and > as entities (Plotly reads a few HTML tags and links in its
// texts; entities it shows as the characters), in the table below through textContent.
'use strict';

window.AirigReport = (() => {
  const LIBRARY = '/dashboard/plotly.min.js';
  const SINCE = [['7d', 'last 7 days'], ['30d', 'last 30 days'], ['12w', 'last 12 weeks']];
  let library = null; // one load per page, shared by every visit to #report

  function loadLibrary() {
    if (window.Plotly) return Promise.resolve(window.Plotly);
    if (!library) {
      library = new Promise((resolve, reject) => {
        const script = document.createElement('script');
        script.src = LIBRARY;
        script.onload = () => (window.Plotly ? resolve(window.Plotly) : reject(new Error('the charting library did not load')));
        script.onerror = () => { library = null; reject(new Error('the charting library could not be loaded from the brain')); };
        document.head.append(script);
      });
    }
    return library;
  }

  // Text for Plotly: shown as the characters it holds, never read as its markup.
  function plain(text) {
    return String(text).replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;');
  }

  const sum = (rows, key) => rows.reduce((total, row) => total + (Number(row[key]) || 0), 0);
  const keyOf = (row) => (row.model ? `${row.type} · ${row.model}` : row.type);

  // The report as Plotly figures: [name, traces, y-axis title, layout extras].
  function figures(report) {
    const x = report.buckets.map((b) => b.label);
    const each = (f) => report.buckets.map(f);
    const keys = [...new Set(report.buckets.flatMap((b) => b.tasks.map(keyOf)))].sort();
    const runs = keys.map((key) => ({
      type: 'scatter', mode: 'lines+markers', name: plain(`${key} p50`), x, connectgaps: false,
      y: each((b) => { const row = b.tasks.find((r) => keyOf(r) === key); return row ? row.run_p50_s : null; }),
    }));
    const p90 = keys.map((key) => ({
      type: 'scatter', mode: 'markers', name: plain(`${key} p90`), x, marker: { symbol: 'triangle-up' },
      y: each((b) => { const row = b.tasks.find((r) => keyOf(r) === key); return row ? row.run_p90_s : null; }),
    }));
    const models = [...new Set(report.buckets.flatMap((b) => b.loads.map((r) => r.model)))].sort();
    const kinds = [...new Set(report.buckets.flatMap((b) => b.alerts.map((r) => r.alert)))].sort();
    return [
      ['tasks', [
        { type: 'bar', name: 'done', x, y: each((b) => sum(b.tasks, 'done')) },
        { type: 'bar', name: 'failed', x, y: each((b) => sum(b.tasks, 'failed')) },
        { type: 'scatter', mode: 'lines+markers', name: 'retries', x, y: each((b) => sum(b.tasks, 'retries')) },
      ], 'tasks', { barmode: 'stack' }],
      ['runtime', [...runs, ...p90], 'seconds (succeeded runs)', {}],
      ['loads', [
        ...models.map((m) => ({ type: 'bar', name: plain(m), x,
          y: each((b) => { const row = b.loads.find((r) => r.model === m); return row ? row.loads : 0; }) })),
        { type: 'scatter', mode: 'lines+markers', name: 'swap s', x, yaxis: 'y2', y: each((b) => sum(b.loads, 'swap_s')) },
      ], 'model loads', { barmode: 'stack', yaxis2: { title: { text: 'swap seconds' }, overlaying: 'y', side: 'right', rangemode: 'tozero' } }],
      ['escalations', [
        { type: 'bar', name: 'escalations', x, y: each((b) => sum(b.escalations, 'escalations')) },
        { type: 'scatter', mode: 'lines+markers', name: 'cost', x, yaxis: 'y2', y: each((b) => sum(b.escalations, 'cost')) },
      ], 'calls', { yaxis2: { title: { text: 'cost' }, overlaying: 'y', side: 'right', rangemode: 'tozero' } }],
      ['alerts', kinds.map((k) => ({ type: 'bar', name: plain(k), x,
        y: each((b) => { const row = b.alerts.find((r) => r.alert === k); return row ? row.fired : 0; }) })),
      'alerts fired', { barmode: 'stack' }],
    ];
  }

  function view(root, params, ui) {
    const { h, fill, empty, pageHead, api } = ui;
    const since = h('select', { name: 'since', 'data-report': 'since' }, SINCE.map(([v, t]) => h('option', { value: v, text: t })));
    const by = h('select', { name: 'by', 'data-report': 'by' }, ['day', 'week'].map((v) => h('option', { value: v, text: `per ${v}` })));
    if (SINCE.some(([v]) => v === params.get('since'))) since.value = params.get('since');
    if (params.get('by') === 'week') by.value = 'week';
    const status = h('p', { class: 'muted small', 'data-report': 'status', role: 'status' });
    const plots = h('div', { class: 'stack', 'data-report': 'plots' });
    const rows = h('div', { class: 'card', 'data-report': 'table' });
    let asked = 0; // a newer ask wins over an older answer still on its way

    async function show() {
      const mine = ++asked;
      status.textContent = 'Reading the history…';
      let report;
      let Plotly;
      try {
        [report, Plotly] = await Promise.all([
          api(`/v1/report?${new URLSearchParams({ since: since.value, by: by.value })}`), loadLibrary()]);
      } catch (err) {
        if (mine !== asked) return;
        status.textContent = '';
        fill(plots, h('div', { class: 'card notice', role: 'alert', 'data-report': 'error', text: err.message }));
        return;
      }
      if (mine !== asked) return;
      status.textContent = `${report.buckets.length} ${report.by}s, UTC`
        + (report.clamped ? `; clamped to retention (${report.retention_days} days)` : '')
        + (report.truncated.length ? `; cut at the row limit: ${report.truncated.join(', ')}` : '');
      fill(plots);
      const ink = getComputedStyle(document.body).color; // the page's text colour, dark theme
      for (const [name, traces, title, extra] of figures(report)) {
        const slot = h('div', { class: 'card report-plot', 'data-plot': name });
        plots.append(slot);
        if (!traces.length) { fill(slot, h('h2', { text: title }), empty(`No ${title} in this window.`)); continue; }
        Plotly.newPlot(slot, traces, {
          title: { text: title }, height: 300, margin: { t: 40, r: 60, b: 40, l: 50 },
          paper_bgcolor: 'rgba(0,0,0,0)', plot_bgcolor: 'rgba(0,0,0,0)', font: { color: ink },
          xaxis: { type: 'category', gridcolor: 'rgba(128,128,128,0.2)' },
          yaxis: { rangemode: 'tozero', gridcolor: 'rgba(128,128,128,0.2)' },
          showlegend: true, legend: { orientation: 'h' }, ...extra,
        }, { displaylogo: false, responsive: true, staticPlot: false, modeBarButtonsToRemove: ['sendDataToCloud'] });
      }
      const lines = report.buckets.flatMap((b) => b.tasks.map((r) => h('tr', { 'data-row': b.label },
        h('td', { text: b.label }), h('td', { text: r.type }), h('td', { class: 'mono', 'data-field': 'model', text: r.model || '—' }),
        h('td', { class: 'num', text: r.done }), h('td', { class: 'num', text: r.failed }), h('td', { class: 'num', text: r.retries }),
        h('td', { class: 'num', text: r.run_p50_s ?? '—' }), h('td', { class: 'num', text: r.run_p90_s ?? '—' }))));
      fill(rows, h('h2', { text: 'Tasks by type and model' }), lines.length
        ? ui.table(['', 'Type', 'Model', { num: 'Done' }, { num: 'Failed' }, { num: 'Retries' }, { num: 'p50 s' }, { num: 'p90 s' }], lines)
        : empty('No task finished in this window.'));
    }

    const form = h('form', { class: 'filters card', 'data-report': 'form', onchange: () => show(),
      onsubmit: (event) => { event.preventDefault(); show(); } },
    h('label', { class: 'field' }, h('span', { text: 'Window' }), since),
    h('label', { class: 'field' }, h('span', { text: 'Buckets' }), by));
    root.append(pageHead('Report', 'Is the kit improving? Tasks, run times, model loads, escalations and alerts over time (`report` adds this host\'s tune and update lines)'),
      form, status, plots, rows);
    let loaded = false;
    return {
      async refresh() {
        if (loaded) return; // not polled: the history is read when asked
        loaded = true;
        await show();
      },
    };
  }

  return { view, figures, plain };
})();
