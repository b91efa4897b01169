// airig operator console: the Search page (issue 39 §4), mounted by app.js as #search.
//
// It asks the brain's search API (POST /v1/search, GET /v1/search/indexes) and shows each
// hit's source, timestamp or page, snippet and score, "[untrusted]" where the index says
// so, and for a video hit its keyframe (GET /v1/search/keyframe, fetched with the bearer
// header and shown as a data: URL, which the page's CSP allows). Every text from the
// brain, snippets above all (they are whatever the indexed documents said), goes through
// textContent: a snippet holding <script> is shown as those characters.
'use strict';

window.AirigSearch = (() => {
  const K_CHOICES = ['5', '10', '20', '50'];
  const TIMESTAMP = /^(\d{1,3}:)?\d{1,2}:\d{1,2}(\.\d+)?$/;

  // Where in the source a hit is: a timestamp (a video), a page, or the locator as given.
  function where(locator) {
    if (locator === null || locator === undefined || locator === '') return null;
    const text = String(locator);
    if (TIMESTAMP.test(text)) return { kind: 'time', text: `at ${text}` };
    if (/^\d+$/.test(text)) return { kind: 'page', text: `page ${text}` };
    return { kind: 'other', text };
  }

  // The keyframe as a data: URL (an <img> cannot send the bearer header), or null.
  async function keyframe(token, hit) {
    const query = new URLSearchParams({ plan: hit.plan_id, task: hit.task, at: String(hit.locator) });
    const answer = await fetch(`/v1/search/keyframe?${query}`, {
      headers: { Authorization: `Bearer ${token}` }, cache: 'no-store', credentials: 'omit',
      referrerPolicy: 'no-referrer',
    });
    if (!answer.ok) return null;
    const blob = await answer.blob();
    if (!/^image\/(png|jpeg|gif|webp)$/.test(blob.type)) return null;
    return new Promise((resolve) => {
      const reader = new FileReader();
      reader.onload = () => resolve(typeof reader.result === 'string' && reader.result.startsWith('data:image/') ? reader.result : null);
      reader.onerror = () => resolve(null);
      reader.readAsDataURL(blob);
    });
  }

  function view(root, params, ui) {
    const { h, fill, empty, pageHead, api, token } = ui;
    const input = h('input', { type: 'search', name: 'query', 'data-search': 'query', required: true,
      maxlength: '10000', placeholder: 'what are you looking for?', spellcheck: 'false', autocomplete: 'off' });
    const indexSelect = h('select', { name: 'index', 'data-search': 'index' }, h('option', { value: '', text: 'the index' }));
    const kSelect = h('select', { name: 'k', 'data-search': 'k' }, K_CHOICES.map((k) => h('option', { value: k, text: `${k} results` })));
    kSelect.value = '10';
    const status = h('p', { class: 'muted small', 'data-search': 'status', role: 'status' });
    const results = h('div', { class: 'stack', 'data-search': 'results' });
    let asked = 0; // a newer search wins over an older answer still on its way

    async function search() {
      const query = input.value.trim();
      if (!query) { status.textContent = 'Type what to look for first.'; return; }
      const mine = ++asked;
      const body = { query, k: Number(kSelect.value) };
      if (indexSelect.value) body.index = indexSelect.value;
      status.textContent = 'Searching…';
      let answer;
      try {
        answer = await api('/v1/search', body);
      } catch (err) {
        if (mine !== asked) return;
        status.textContent = '';
        fill(results, h('div', { class: 'card notice', role: 'alert', 'data-search': 'error', text: err.message }));
        return;
      }
      if (mine !== asked) return;
      status.textContent = `${answer.results.length} from ${answer.index} (${answer.model})`;
      fill(results, answer.results.length
        ? answer.results.map((hit, i) => hitCard(hit, i))
        : empty('Nothing in the index is near those words.'));
      for (const [i, hit] of answer.results.entries()) {
        const place = where(hit.locator);
        if (!place || place.kind !== 'time') continue;
        keyframe(token(), hit).then((url) => {
          const slot = results.querySelector(`[data-hit="${i}"] .hit-frame`);
          if (url && slot && mine === asked) fill(slot, h('img', { src: url, alt: `keyframe ${place.text}`, 'data-keyframe': String(i) }));
        }).catch(() => {});
      }
    }

    function hitCard(hit, i) {
      const place = where(hit.locator);
      return h('article', { class: 'card hit', 'data-hit': String(i) },
        h('div', { class: 'hit-frame' }),
        h('div', { class: 'hit-body' },
          h('div', { class: 'hit-head' },
            hit.untrusted ? h('span', { class: 'untrusted', 'data-untrusted': '', title: 'embedded by an untrusted rig, or from tainted input', text: '[untrusted]' }) : null,
            h('span', { class: 'mono hit-source', 'data-field': 'source', text: hit.source || '(no source)' }),
            place ? h('span', { class: `chip hit-${place.kind}`, 'data-field': 'where', text: place.text }) : null,
            h('span', { class: 'muted small', 'data-field': 'score', text: `score ${Number(hit.score).toFixed(3)}` })),
          h('p', { class: 'hit-snippet', 'data-field': 'snippet', text: hit.snippet }),
          h('p', { class: 'muted small' }, 'from ',
            h('a', { href: `#plan/${encodeURIComponent(hit.plan_id)}`, class: 'mono', text: hit.plan_id }),
            ' · task ', h('span', { class: 'mono', text: hit.task }))));
    }

    const form = h('form', { class: 'filters card search-form', 'data-search': 'form',
      onsubmit: (event) => { event.preventDefault(); search(); } },
    h('label', { class: 'field grow' }, h('span', { text: 'Query' }), input),
    h('label', { class: 'field' }, h('span', { text: 'Index' }), indexSelect),
    h('label', { class: 'field' }, h('span', { text: 'Show' }), kSelect),
    h('button', { class: 'btn btn-primary', type: 'submit', text: 'Search' }));
    root.append(pageHead('Search', 'What embed tasks indexed: notes of videos, pages of PDFs, articles'), form, status, results);
    if (params.get('q')) { input.value = params.get('q'); }
    let loaded = false;
    return {
      async refresh() {
        if (loaded) return; // the page is not polled: a search runs when asked
        loaded = true;
        const known = await api('/v1/search/indexes');
        fill(indexSelect, h('option', { value: '', text: known.indexes.length > 1 ? 'any index (one model)' : 'the index' }),
          known.indexes.map((ix) => h('option', { value: ix.name, text: `${ix.name} · ${ix.entries} entries` })));
        if (!known.indexes.length) status.textContent = 'No search index yet: run a recipe that embeds (video-notes, pdf-text, zim-articles).';
        if (input.value) search();
      },
    };
  }

  return { view, where };
})();
