// `select_option`: selects the option of the `<select>` (see find.js) whose value
// (`by` = 'value'), label ('label') or position ('index') is `wanted`, and fires `input` and
// `change` as a person's choice would. Answers the chosen option or `{error, ...}`.
(selector, index, by, wanted) => {
  const found = find(selector, index);
  if (found.error) return found;
  const el = found.el;
  if (el.tagName !== 'SELECT') return { error: 'kind', kind: `a <${el.tagName.toLowerCase()}>` };
  if (el.disabled) return { error: 'state', message: 'the <select> is disabled' };
  const options = [...el.options];
  let i = -1;
  if (by === 'index') i = wanted < options.length ? wanted : -1;
  else if (by === 'value') i = options.findIndex((o) => o.value === wanted);
  else i = options.findIndex((o) => o.label.trim() === wanted.trim() || o.text.trim() === wanted.trim());
  if (i < 0) {
    return {
      error: 'option',
      available: options.slice(0, 30).map((o) => (by === 'label' ? o.label.trim() : o.value)),
      count: options.length,
    };
  }
  const option = options[i];
  if (option.disabled) return { error: 'state', message: `option ${i} is disabled` };
  el.scrollIntoView({ block: 'center', inline: 'center', behavior: 'instant' });
  el.focus();
  if (el.multiple) options.forEach((o) => { o.selected = o === option; });
  else el.selectedIndex = i;
  el.dispatchEvent(new Event('input', { bubbles: true }));
  el.dispatchEvent(new Event('change', { bubbles: true }));
  return { value: option.value, label: option.label, index: i };
}
