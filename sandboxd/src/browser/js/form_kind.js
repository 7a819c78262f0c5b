// `fill_form`: what kind of field an item names, to pick how to set it: `select`, `checkbox`
// (also radio buttons and ARIA checkboxes), `file`, or `text`.
(selector, index) => {
  const found = find(selector, index);
  if (found.error) return found;
  const el = found.el;
  const tag = el.tagName.toLowerCase();
  const type = (el.getAttribute('type') || '').toLowerCase();
  const role = el.getAttribute('role') || '';
  if (tag === 'select') return { kind: 'select' };
  if (tag === 'input' && (type === 'checkbox' || type === 'radio')) return { kind: 'checkbox' };
  if (['checkbox', 'radio', 'switch'].includes(role)) return { kind: 'checkbox' };
  if (tag === 'input' && type === 'file') return { kind: 'file' };
  return { kind: 'text' };
}
