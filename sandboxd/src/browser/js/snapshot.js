// A compact view of the page for agents: URL, title, the start of the visible text, and the
// visible links, buttons and form fields, each with a CSS selector that matches exactly that
// element (checked with querySelectorAll). Bounded: `textLimit` characters of text, `itemLimit`
// items of each kind, `itemText` characters per item text; `counts` gives the totals.
(textLimit, itemLimit, itemText) => {
  const clip = (s, n) => {
    const t = (s || '').replace(/\s+/g, ' ').trim();
    return t.length > n ? t.slice(0, n - 1) + '…' : t;
  };
  const unique = (selector, el) => {
    try {
      const found = document.querySelectorAll(selector);
      return found.length === 1 && found[0] === el;
    } catch (e) {
      return false;
    }
  };
  const quote = (v) => '"' + v.replace(/\\/g, '\\\\').replace(/"/g, '\\"').replace(/\n/g, '\\a ') + '"';
  const selectorFor = (el) => {
    const tag = el.tagName.toLowerCase();
    if (el.id && unique('#' + CSS.escape(el.id), el)) return '#' + CSS.escape(el.id);
    for (const name of ['name', 'data-testid', 'data-test', 'aria-label', 'placeholder', 'href']) {
      const value = el.getAttribute(name);
      if (value && value.length <= 120) {
        const s = `${tag}[${name}=${quote(value)}]`;
        if (unique(s, el)) return s;
      }
    }
    const parts = [];
    let node = el;
    while (node && node.nodeType === Node.ELEMENT_NODE) {
      if (node !== el && node.id && unique('#' + CSS.escape(node.id), node)) {
        parts.unshift('#' + CSS.escape(node.id));
      } else {
        const name = node.tagName.toLowerCase();
        let index = 1;
        let total = 1;
        for (let s = node.previousElementSibling; s; s = s.previousElementSibling) if (s.tagName === node.tagName) { index++; total++; }
        for (let s = node.nextElementSibling; s; s = s.nextElementSibling) if (s.tagName === node.tagName) total++;
        parts.unshift(total > 1 ? `${name}:nth-of-type(${index})` : name);
      }
      const s = parts.join(' > ');
      if (unique(s, el)) return s;
      if (parts[0].startsWith('#')) break;
      node = node.parentElement;
    }
    return parts.join(' > ');
  };
  const visible = (el) => {
    const rect = el.getBoundingClientRect();
    if (rect.width === 0 || rect.height === 0) return false;
    if (el.checkVisibility) return el.checkVisibility({ visibilityProperty: true });
    return getComputedStyle(el).visibility !== 'hidden';
  };
  const labelOf = (el) => {
    const aria = el.getAttribute('aria-label');
    if (aria) return aria;
    const by = el.getAttribute('aria-labelledby');
    if (by) {
      const text = by.split(/\s+/).map((id) => document.getElementById(id)).filter(Boolean).map((n) => n.innerText).join(' ');
      if (text.trim()) return text;
    }
    if (el.labels && el.labels.length) return [...el.labels].map((l) => l.innerText).join(' ');
    return el.getAttribute('title') || '';
  };
  const collect = (selector, make) => {
    const items = [];
    let total = 0;
    for (const el of document.querySelectorAll(selector)) {
      if (!visible(el)) continue;
      total++;
      if (items.length < itemLimit) items.push(make(el));
    }
    return [items, total];
  };
  const [links, linkCount] = collect('a[href]', (el) => ({
    text: clip(el.innerText || el.getAttribute('aria-label') || el.title, itemText),
    href: el.href,
    selector: selectorFor(el),
  }));
  const [buttons, buttonCount] = collect(
    'button, input[type=button], input[type=submit], input[type=reset], input[type=image], [role=button]',
    (el) => ({
      text: clip(el.innerText || el.value || el.getAttribute('aria-label') || el.title || el.alt, itemText),
      selector: selectorFor(el),
    }),
  );
  const [inputs, inputCount] = collect(
    'input:not([type=hidden]):not([type=button]):not([type=submit]):not([type=reset]):not([type=image]), textarea, select, [contenteditable=""], [contenteditable=true]',
    (el) => {
      const tag = el.tagName.toLowerCase();
      const type = tag === 'input' ? (el.getAttribute('type') || 'text').toLowerCase() : (tag === 'select' || tag === 'textarea' ? tag : 'contenteditable');
      const item = {
        type,
        name: el.getAttribute('name') || '',
        placeholder: el.getAttribute('placeholder') || '',
        label: clip(labelOf(el), itemText),
        selector: selectorFor(el),
      };
      if (type === 'checkbox' || type === 'radio') item.checked = !!el.checked;
      else if (type === 'select') item.value = clip(el.selectedOptions && el.selectedOptions.length ? el.selectedOptions[0].text : '', itemText);
      else if (type === 'contenteditable') item.value = clip(el.innerText, itemText);
      else if (type !== 'password' && type !== 'file') item.value = clip(el.value, itemText);
      return item;
    },
  );
  const root = document.body || document.documentElement;
  const text = root ? root.innerText.replace(/\s+/g, ' ').trim() : '';
  return {
    url: location.href,
    title: document.title,
    text_preview: text.length > textLimit ? text.slice(0, textLimit) : text,
    text_length: text.length,
    links,
    buttons,
    inputs,
    counts: { links: linkCount, buttons: buttonCount, inputs: inputCount },
  };
}
