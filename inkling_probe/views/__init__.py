"""Ways to show a comparison: terminal (rich), and more (markdown, html, plots) loaded lazily."""
