// `scroll_to_element`: scrolls the first match of `selector` into the middle of the viewport.
// Answers where it is then, whether it is visible, and the page's scroll position.
(selector) => {
  const found = find(selector, 0);
  if (found.error) return found;
  const el = found.el;
  el.scrollIntoView({ block: 'center', inline: 'center', behavior: 'instant' });
  const rect = el.getBoundingClientRect();
  let s = el.tagName.toLowerCase();
  if (el.id) s += '#' + el.id;
  return {
    element: s,
    x: rect.left + rect.width / 2,
    y: rect.top + rect.height / 2,
    visible: rect.width > 0 && rect.height > 0 &&
      (!el.checkVisibility || el.checkVisibility({ visibilityProperty: true })),
    scroll_x: scrollX,
    scroll_y: scrollY,
  };
}
