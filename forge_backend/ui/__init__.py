"""``kforge ui``: a local, read-only web page over the search records of a cache directory: the searches (live ones
as they run), each search's tree, and each candidate's source, its diff against its parent, its launch plan, and
why it won or failed. data.py builds the views, server.py serves them with the page (page.html, app.js, style.css)."""
