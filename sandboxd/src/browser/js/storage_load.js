// Browser state: sets localStorage items in the tab when it shows `origin`; answers how many
// were set, or null when the tab shows another origin.
(origin, items) => {
  try {
    if (location.origin !== origin) return null;
    for (const { name, value } of items) localStorage.setItem(name, value);
    return items.length;
  } catch (e) {
    return null;
  }
}
