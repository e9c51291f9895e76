"""``kforge ui``: a local, read-only web page over a cache directory: the searches (live ones as they run), each
search's tree, and each candidate's source, its diff against its parent, its launch plan, and why it won or failed;
and the kernel records a compile here can use, local, team and shipped, with the tier that answers each key. data.py
builds the search views, kernels.py the record views, server.py serves them with the page (page.html, app.js,
style.css)."""
