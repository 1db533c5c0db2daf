"""The learning phase (paper III-A2, AIPA): forecast an application's next run from traces of its runs.

- :mod:`iez.predict.synth`: synthetic IOR and HACC-IO runs in the tracing mode's CSV format;
- :mod:`iez.predict.series`: runs as time series, and the series continued exactly without a fit;
- :mod:`iez.predict.arima`: ARIMA order selection (the paper's exhaustive grid, or a fast stepwise search);
- :mod:`iez.predict.names`: file name templates of the next run;
- :mod:`iez.predict.accuracy`: how good a forecast of a held-out run is, per variable;
- :mod:`iez.predict.aipa`: all of it, :func:`predict`;
- :mod:`iez.predict.learn`: predictions stored as the application's requests, and the re-trace flag.
"""

from iez.predict.aipa import Prediction, predict
from iez.predict.series import VARIABLES, PRequest, RunData, load_runs

__all__ = ["VARIABLES", "PRequest", "Prediction", "RunData", "load_runs", "predict"]
