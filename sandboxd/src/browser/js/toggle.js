// `check` / `uncheck` when the element cannot be clicked where it is (hidden behind a styled
// label, say): clicks it from script, which toggles it and fires `input` and `change`.
(selector, index) => {
  const found = find(selector, index);
  if (found.error) return found;
  found.el.click();
  return {};
}
