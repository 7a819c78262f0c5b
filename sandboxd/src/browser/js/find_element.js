// `upload_file`, second step: the element itself (as a remote object, for DOM commands).
(selector) => find(selector, 0).el
