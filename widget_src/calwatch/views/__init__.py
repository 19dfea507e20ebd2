"""What a person sees, as data and Vega-Lite specs, independent of where it is drawn.

- :mod:`~calwatch.views.charts` — chart datasets (:mod:`~calwatch.views.charts.data`), the
  Altair builders (one module per kind of calibrator) and the chart kinds
  (:mod:`~calwatch.views.charts.specs`);
- :mod:`~calwatch.views.dashboard` — the dashboard's layout (sections, window panels, the row cache);
- :mod:`~calwatch.views.cards` — the numbers on the cards (exact intervals, held rows);
- :mod:`~calwatch.views.health` — the chip rule: is each calibrator's promise holding (:func:`health`);
- :mod:`~calwatch.views.resolution` — batches pooled into buckets on a long stream;
- :mod:`~calwatch.views.live` — a live view's datasets at a cost per update that does not grow.

The widget (:mod:`calwatch.widget`) and the report (:mod:`calwatch.publish`) draw these.
"""

from calwatch.views.cards import overview_rows
from calwatch.views.live import LiveDatasets
from calwatch.views.resolution import Resolution

__all__ = ["LiveDatasets", "Resolution", "overview_rows"]
