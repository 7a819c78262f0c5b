// Scrolls by (dx, dy) CSS pixels: the page when it can scroll that way, otherwise the scrollable
// element under the middle of the viewport (pages whose body does not scroll). Instant, so the
// position answered is the final one.
(dx, dy) => {
  const root = document.scrollingElement || document.documentElement;
  const scrollable = (el) => {
    const s = getComputedStyle(el);
    const y = dy !== 0 && /(auto|scroll|overlay)/.test(s.overflowY) && el.scrollHeight > el.clientHeight;
    const x = dx !== 0 && /(auto|scroll|overlay)/.test(s.overflowX) && el.scrollWidth > el.clientWidth;
    return x || y;
  };
  const pageCan = (dy !== 0 && root.scrollHeight > innerHeight) || (dx !== 0 && root.scrollWidth > innerWidth);
  let target = null;
  if (!pageCan) {
    let el = document.elementFromPoint(innerWidth / 2, innerHeight / 2);
    while (el && el !== root && el !== document.body) {
      if (scrollable(el)) { target = el; break; }
      el = el.parentElement;
    }
  }
  if (target) {
    target.scrollBy({ left: dx, top: dy, behavior: 'instant' });
    return { target: target.tagName.toLowerCase() + (target.id ? '#' + target.id : ''), x: target.scrollLeft, y: target.scrollTop };
  }
  window.scrollBy({ left: dx, top: dy, behavior: 'instant' });
  return { target: 'window', x: scrollX, y: scrollY };
}
