// Whether the first match of `selector` is in `state`: attached, detached, visible or hidden.
(selector, state) => {
  let el;
  try {
    el = document.querySelector(selector);
  } catch (e) {
    return { error: String((e && e.message) || e) };
  }
  let visible = false;
  if (el) {
    const rect = el.getBoundingClientRect();
    visible = rect.width > 0 && rect.height > 0 && getComputedStyle(el).visibility !== 'hidden';
  }
  switch (state) {
    case 'attached': return { ok: !!el };
    case 'detached': return { ok: !el };
    case 'hidden': return { ok: !visible };
    default: return { ok: visible };
  }
}
