// Prepares `fill`: focuses the element (see find.js) and selects its content, so that
// inserting text replaces it. Inputs whose value is not typed text (date, time, ...) get the
// value set directly. Answers `{mode: 'insert'}`, `{mode: 'done'}` or `{error, ...}`.
(selector, index, text) => {
  const found = find(selector, index);
  if (found.error) return found;
  const el = found.el;
  const tag = el.tagName;
  if (el.disabled) return { error: 'state', message: 'the element is disabled' };
  if (el.readOnly) return { error: 'state', message: 'the element is read-only' };
  el.scrollIntoView({ block: 'center', inline: 'center', behavior: 'instant' });
  if (tag === 'INPUT') {
    const type = (el.getAttribute('type') || 'text').toLowerCase();
    const notText = ['checkbox', 'radio', 'button', 'submit', 'reset', 'image', 'file', 'hidden', 'range', 'color'];
    if (notText.includes(type)) return { error: 'kind', kind: `an input of type ${type}` };
    el.focus();
    const setDirectly = ['date', 'time', 'datetime-local', 'month', 'week', 'number'];
    if (!setDirectly.includes(type)) {
      try {
        el.select();
        return { mode: 'insert' };
      } catch (e) { /* falls through to setting the value */ }
    }
    el.value = text;
    el.dispatchEvent(new Event('input', { bubbles: true }));
    el.dispatchEvent(new Event('change', { bubbles: true }));
    if (text !== '' && el.value === '') {
      return { error: 'state', message: `the ${type} input does not accept ${JSON.stringify(text)}` };
    }
    return { mode: 'done' };
  }
  if (tag === 'TEXTAREA') {
    el.focus();
    el.select();
    return { mode: 'insert' };
  }
  if (el.isContentEditable) {
    el.focus();
    const range = document.createRange();
    range.selectNodeContents(el);
    const selection = getSelection();
    selection.removeAllRanges();
    selection.addRange(range);
    return { mode: 'insert' };
  }
  if (tag === 'SELECT') return { error: 'kind', kind: 'a <select> (choose an option instead)' };
  return { error: 'kind', kind: `a <${tag.toLowerCase()}>` };
}
