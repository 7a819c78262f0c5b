// `check` / `uncheck`, first step: what the element (see find.js) is and whether it is
// checked; when it can be clicked where it is (visible and not covered), the point to click.
(selector, index) => {
  const found = find(selector, index);
  if (found.error) return found;
  const el = found.el;
  const tag = el.tagName.toLowerCase();
  const type = (el.getAttribute('type') || '').toLowerCase();
  const role = el.getAttribute('role') || '';
  let kind;
  let checked;
  if (tag === 'input' && (type === 'checkbox' || type === 'radio')) {
    kind = type;
    checked = el.checked;
  } else if (['checkbox', 'radio', 'switch', 'menuitemcheckbox'].includes(role)) {
    kind = role;
    checked = el.getAttribute('aria-checked') === 'true';
  } else {
    return { error: 'kind', kind: tag === 'input' ? `an input of type ${type || 'text'}` : `a <${tag}>` };
  }
  const disabled = !!el.disabled || el.getAttribute('aria-disabled') === 'true';
  el.scrollIntoView({ block: 'center', inline: 'center', behavior: 'instant' });
  const rect = el.getBoundingClientRect();
  let x = null;
  let y = null;
  const shown = rect.width > 0 && rect.height > 0 &&
    (!el.checkVisibility || el.checkVisibility({ visibilityProperty: true }));
  if (shown) {
    const cx = rect.left + rect.width / 2;
    const cy = rect.top + rect.height / 2;
    const hit = document.elementFromPoint(cx, cy);
    if (hit && (hit === el || el.contains(hit))) {
      x = cx;
      y = cy;
    }
  }
  return { kind, checked, disabled, x, y };
}
