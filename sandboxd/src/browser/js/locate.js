// Finds the element a click or hover acts on (see find.js),
// scrolled into the middle of the viewport. Answers where its centre is, or why it cannot be
// acted on (no match, hidden, covered by another element, disabled).
(selector, index) => {
  const describe = (n) => {
    let s = n.tagName.toLowerCase();
    if (n.id) s += '#' + n.id;
    else if (n.classList && n.classList.length) s += '.' + [...n.classList].slice(0, 2).join('.');
    return s;
  };
  const found = find(selector, index);
  if (found.error) return found;
  const el = found.el;
  const all = { length: found.count };
  el.scrollIntoView({ block: 'center', inline: 'center', behavior: 'instant' });
  const rect = el.getBoundingClientRect();
  const style = getComputedStyle(el);
  if (rect.width === 0 || rect.height === 0 || style.visibility === 'hidden' ||
      (el.checkVisibility && !el.checkVisibility({ visibilityProperty: true }))) {
    return { error: 'hidden', count: all.length, element: describe(el) };
  }
  const x = Math.min(Math.max(rect.left + rect.width / 2, 0), innerWidth - 1);
  const y = Math.min(Math.max(rect.top + rect.height / 2, 0), innerHeight - 1);
  const hit = document.elementFromPoint(x, y);
  const covered = hit && hit !== el && !el.contains(hit) ? describe(hit) : null;
  return {
    count: all.length, element: describe(el), x, y, covered,
    disabled: !!el.disabled,
  };
}
