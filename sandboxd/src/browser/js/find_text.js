// `find_text`: where `keyword` occurs in the page's text (case-insensitively), like the
// browser's find bar: each match with the text around it, the element holding it, whether it is
// visible, and its position in the viewport. Bounded: `limit` matches, `context` characters
// either side; `total` counts every match.
(keyword, limit, context) => {
  const describe = (n) => {
    let s = n.tagName.toLowerCase();
    if (n.id) s += '#' + n.id;
    else if (n.classList && n.classList.length) s += '.' + [...n.classList].slice(0, 2).join('.');
    return s;
  };
  const needle = keyword.toLowerCase();
  const root = document.body || document.documentElement;
  const matches = [];
  let total = 0;
  if (!root) return { matches, total };
  const walker = document.createTreeWalker(root, NodeFilter.SHOW_TEXT, {
    acceptNode: (node) => {
      const parent = node.parentElement;
      if (!parent || ['SCRIPT', 'STYLE', 'NOSCRIPT', 'TEMPLATE'].includes(parent.tagName)) {
        return NodeFilter.FILTER_REJECT;
      }
      return NodeFilter.FILTER_ACCEPT;
    },
  });
  for (let node = walker.nextNode(); node; node = walker.nextNode()) {
    const text = node.data;
    const lower = text.toLowerCase();
    for (let at = lower.indexOf(needle); at >= 0; at = lower.indexOf(needle, at + needle.length)) {
      total++;
      if (matches.length >= limit) continue;
      const range = document.createRange();
      range.setStart(node, at);
      range.setEnd(node, at + needle.length);
      const rect = range.getBoundingClientRect();
      const parent = node.parentElement;
      const visible = rect.width > 0 && rect.height > 0 &&
        (!parent.checkVisibility || parent.checkVisibility({ visibilityProperty: true }));
      const before = text.slice(Math.max(0, at - context), at);
      const after = text.slice(at + needle.length, at + needle.length + context);
      matches.push({
        index: matches.length,
        text: text.slice(at, at + needle.length),
        context: (before + text.slice(at, at + needle.length) + after).replace(/\s+/g, ' ').trim(),
        element: describe(parent),
        visible,
        x: rect.left + rect.width / 2,
        y: rect.top + rect.height / 2,
      });
    }
  }
  return { matches, total };
}
