// `upload_file`, first step: whether the first match of `selector` is an enabled file input,
// and whether it takes several files.
(selector) => {
  const found = find(selector, 0);
  if (found.error) return found;
  const el = found.el;
  const tag = el.tagName.toLowerCase();
  const type = (el.getAttribute('type') || '').toLowerCase();
  if (tag !== 'input' || type !== 'file') {
    return { error: 'kind', kind: tag === 'input' ? `an input of type ${type || 'text'}` : `a <${tag}>` };
  }
  if (el.disabled) return { error: 'state', message: 'the file input is disabled' };
  return { multiple: !!el.multiple };
}
