"""Paper reproductions: settings, the papers' published numbers and table builders."""
