// Scrolls the page to (x, y) CSS pixels; a null coordinate stays where it is.
(x, y) => {
  window.scrollTo({ left: x === null ? scrollX : x, top: y === null ? scrollY : y, behavior: 'instant' });
  return { target: 'window', x: scrollX, y: scrollY };
}
