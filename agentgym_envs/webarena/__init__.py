"""WebArena: five embedded web sites (or real WebArena deployments) driven through headless Chromium."""
