// The page's interactive elements in document order, as `GET /v1/browser/page/elements` numbers
// them: visible links, buttons, form fields, editable elements and elements with an interactive
// ARIA role, plus file inputs even when hidden (pages often hide them behind a styled button).
// The same function resolves an index in click and fill, so an index means the same element as
// long as the page has not changed in between.
() => {
  const selector = [
    'a[href]', 'button', 'input:not([type=hidden])', 'textarea', 'select', 'summary',
    '[contenteditable=""]', '[contenteditable=true]', '[role=button]', '[role=link]',
    '[role=checkbox]', '[role=radio]', '[role=switch]', '[role=tab]', '[role=menuitem]',
    '[role=option]', '[role=combobox]', '[role=textbox]',
  ].join(', ');
  const visible = (el) => {
    if (el.tagName === 'INPUT' && (el.getAttribute('type') || '').toLowerCase() === 'file') return true;
    const rect = el.getBoundingClientRect();
    if (rect.width === 0 || rect.height === 0) return false;
    if (el.checkVisibility) return el.checkVisibility({ visibilityProperty: true });
    return getComputedStyle(el).visibility !== 'hidden';
  };
  return [...document.querySelectorAll(selector)].filter(visible);
}
