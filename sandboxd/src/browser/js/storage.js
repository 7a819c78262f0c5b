// Browser state: the tab's origin and its localStorage, for `state/save`. Pages that are not
// http(s) (`about:blank`, `data:`, `chrome:`) and storage the page may not use answer `null`.
() => {
  try {
    if (location.protocol !== 'http:' && location.protocol !== 'https:') return null;
    const items = [];
    for (let i = 0; i < localStorage.length; i++) {
      const name = localStorage.key(i);
      items.push({ name, value: localStorage.getItem(name) });
    }
    return { origin: location.origin, localStorage: items };
  } catch (e) {
    return null;
  }
}
