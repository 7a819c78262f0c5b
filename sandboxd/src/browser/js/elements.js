// `GET /v1/browser/page/elements`: the interactive elements (interactive.js) with their index,
// what they are, what they say and where they are. Bounded: `limit` elements, `textLimit`
// characters per text; `total` is how many there are.
(limit, textLimit) => {
  const clip = (s) => {
    const t = (s || '').replace(/\s+/g, ' ').trim();
    return t.length > textLimit ? t.slice(0, textLimit - 1) + '…' : t;
  };
  const labelOf = (el) => {
    const aria = el.getAttribute('aria-label');
    if (aria) return aria;
    if (el.labels && el.labels.length) return [...el.labels].map((l) => l.innerText).join(' ');
    return el.getAttribute('title') || '';
  };
  const selectorOf = (el) => {
    const tag = el.tagName.toLowerCase();
    const unique = (s) => {
      try {
        const found = document.querySelectorAll(s);
        return found.length === 1 && found[0] === el;
      } catch (e) {
        return false;
      }
    };
    if (el.id && unique('#' + CSS.escape(el.id))) return '#' + CSS.escape(el.id);
    const name = el.getAttribute('name');
    if (name) {
      const s = `${tag}[name="${name.replace(/["\\]/g, '\\$&')}"]`;
      if (unique(s)) return s;
    }
    return null;
  };
  const all = interactive();
  const elements = all.slice(0, limit).map((el, index) => {
    const tag = el.tagName.toLowerCase();
    const rect = el.getBoundingClientRect();
    const item = {
      index,
      tag,
      type: tag === 'input' ? (el.getAttribute('type') || 'text').toLowerCase() : (el.getAttribute('role') || tag),
      text: clip(el.innerText || el.value || el.getAttribute('aria-label') || el.title || el.alt),
      selector: selectorOf(el),
      x: rect.left + rect.width / 2,
      y: rect.top + rect.height / 2,
      width: rect.width,
      height: rect.height,
      in_viewport: rect.bottom > 0 && rect.right > 0 && rect.top < innerHeight && rect.left < innerWidth,
      disabled: !!el.disabled,
    };
    const name = el.getAttribute('name');
    if (name) item.name = name;
    const placeholder = el.getAttribute('placeholder');
    if (placeholder) item.placeholder = placeholder;
    const label = clip(labelOf(el));
    if (label) item.label = label;
    if (tag === 'a') item.href = el.href;
    if (item.type === 'checkbox' || item.type === 'radio') item.checked = !!el.checked;
    else if (tag === 'select') {
      item.value = el.value;
      item.options = [...el.options].slice(0, 50).map((o) => ({ value: o.value, label: clip(o.label) }));
    } else if ((tag === 'input' || tag === 'textarea') && item.type !== 'password' && item.type !== 'file') {
      item.value = clip(el.value);
    }
    return item;
  });
  return { elements, total: all.length };
}
