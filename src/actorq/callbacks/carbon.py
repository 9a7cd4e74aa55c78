"""CarbonTracker: the run's energy and CO2 from codecarbon, actor worker processes included.

codecarbon is imported here and nowhere else. The tracker is codecarbon's
``OfflineEmissionsTracker`` (no network at run time; the carbon intensity comes from the
country's, or the US state's / Canadian province's, energy mix shipped with codecarbon) in
``tracking_mode="machine"``: the actors are separate processes, so a per-process tracker
would miss them. Machine mode counts everything the machine does during the fit, other
jobs too; the summary records the mode beside the figures.

Example:
    >>> carbon = CarbonTracker(country_iso_code="USA", log_every_s=30)
    >>> carbon.schedule.restart(100.0)  # a log at t=100 s (time.perf_counter())
    >>> carbon.should_update(129.0), carbon.should_update(130.0)
    (False, True)
    >>> CarbonTracker(region="California").region
    'california'
"""

from __future__ import annotations

import contextlib
import logging
import time
from typing import Any

import lightning as L
from lightning.pytorch.callbacks import Callback
from typing_extensions import override

from actorq.callbacks.schedule import Every

log = logging.getLogger(__name__)

TOOL = "codecarbon OfflineEmissionsTracker"
_KWH_TO_J = 3.6e6


class CarbonTracker(Callback):
    """Measures energy (kWh) and emissions (kg CO2eq) from the start of the fit to its end.

    Starts with the fit (``on_fit_start``; nothing during sanity checks) and stops on a
    normal end (``on_fit_end``), on an exception and on Ctrl-C (``on_exception``).
    Every ``log_every_s`` seconds of wall-clock, and once at the end, it logs
    ``energy/kwh`` and ``energy/co2_kg`` (totals so far) and ``energy/power_w`` (mean power
    since the previous log) at the current env frame. :meth:`summary` is the ``"energy"``
    object of ``summary.json``: totals, codecarbon's measurement method per device, the
    tracking mode and the location. If codecarbon cannot measure (not installed, the
    tracker fails to start), the run goes on, a warning says why once, and the summary holds
    ``"kwh": null, "co2_kg": null`` and a ``"reason"``.

    The totals go into checkpoints (``state_dict``), so a resumed run adds to them.

    Args:
        country_iso_code: 3-letter ISO code of the country whose energy mix sets the carbon
            intensity (codecarbon's ``global_energy_mix.json``).
        region: optional US state or Canadian province (e.g. ``"California"``), for a finer
            energy mix.
        tracking_mode: ``"machine"`` (the default; counts the actor processes) or
            ``"process"`` (this process only, which misses the actors).
        measure_power_secs: codecarbon's interval between power measurements.
        log_every_s: seconds of wall-clock between TensorBoard logs.
    """

    def __init__(self, country_iso_code: str = "USA", region: str | None = None,
                 tracking_mode: str = "machine", measure_power_secs: float = 15.0,
                 log_every_s: float = 30.0):
        if not (isinstance(country_iso_code, str) and len(country_iso_code) == 3 and country_iso_code.isalpha()):
            raise ValueError(f"callbacks.carbon.country_iso_code must be a 3-letter ISO code, got {country_iso_code!r}")
        if region is not None and (not isinstance(region, str) or not region.strip()):
            raise ValueError(f"callbacks.carbon.region must be a non-empty name or null, got {region!r}")
        if tracking_mode not in ("machine", "process"):
            raise ValueError(f"callbacks.carbon.tracking_mode must be 'machine' or 'process', got {tracking_mode!r}")
        if measure_power_secs <= 0:
            raise ValueError(f"callbacks.carbon.measure_power_secs must be positive, got {measure_power_secs}")
        if log_every_s <= 0:
            raise ValueError(f"callbacks.carbon.log_every_s must be positive, got {log_every_s}")
        self.country_iso_code = country_iso_code.upper()
        self.region = region.strip().lower() if region else None
        self.tracking_mode = tracking_mode
        self.measure_power_secs = float(measure_power_secs)
        self.log_every_s = float(log_every_s)
        # Totals of earlier segments of a resumed run (from a checkpoint).
        self.previous = {"kwh": 0.0, "co2_kg": 0.0, "duration_s": 0.0}
        self.reason: str | None = None
        self._tracker = None
        self._capture: _Capture | None = None
        self._details: dict[str, Any] = {}
        self._stopped = False
        self._last_log = (0.0, 0.0)  # (perf_counter, kWh) at the previous log
        self.schedule = Every(self.log_every_s, first=0.0)  # in seconds of perf_counter

    # --- schedule and hooks ------------------------------------------------------------

    def should_update(self, now: float) -> bool:
        """Whether ``now`` (``time.perf_counter()``) calls for a log: ``log_every_s`` after the last."""
        return self.schedule.due(now)

    @property
    def running(self) -> bool:
        return self._tracker is not None and not self._stopped

    @override
    def on_fit_start(self, trainer: L.Trainer, pl_module) -> None:
        if trainer.sanity_checking:
            return
        self.start()

    @override
    def on_train_batch_end(self, trainer: L.Trainer, pl_module, outputs, batch, batch_idx: int) -> None:
        if trainer.sanity_checking or not self.running:
            return
        if self.should_update(time.perf_counter()):
            self._log(trainer, pl_module)

    @override
    def on_fit_end(self, trainer: L.Trainer, pl_module) -> None:
        self._finish(trainer, pl_module)

    @override
    def on_exception(self, trainer: L.Trainer, pl_module, exception: BaseException) -> None:
        # Lightning calls this for Ctrl-C (KeyboardInterrupt) too.
        self._finish(trainer, pl_module)

    @override
    def teardown(self, trainer: L.Trainer, pl_module, stage: str) -> None:
        self.stop()

    # --- the tracker -------------------------------------------------------------------

    def start(self) -> None:
        """Starts codecarbon's tracker; on any failure records why and measures nothing."""
        if self._tracker is not None or self.reason is not None:
            return
        try:
            import codecarbon
            from codecarbon.output_methods.base_output import BaseOutput
        except Exception as error:  # noqa: BLE001 - any import failure means no measurement
            self._fail(f"codecarbon cannot be imported ({type(error).__name__}: {error})")
            return
        # After the import (which sets codecarbon's logger up): its INFO/WARNING lines are
        # noise here, and a failure reaches our own warning below.
        logging.getLogger("codecarbon").setLevel(logging.ERROR)
        capture = _make_capture(BaseOutput)
        kwargs = {"country_iso_code": self.country_iso_code, "tracking_mode": self.tracking_mode,
                  "measure_power_secs": self.measure_power_secs, "output_methods": [],
                  "output_handlers": [capture], "log_level": "error", "allow_multiple_runs": True,
                  "project_name": "actorq"}
        if self.region:
            kwargs["region"] = self.region
        tracker = None
        try:
            tracker = codecarbon.OfflineEmissionsTracker(**kwargs)
            # Unlike start(), which swallows its errors, this raises them: hardware detection
            # is what fails on an unsupported machine.
            hardware = tracker.get_detected_hardware()
            tracker.start()
            if tracker.flush() is None or capture.last is None:
                raise RuntimeError("the tracker did not start (codecarbon swallowed the error)")
        except Exception as error:  # noqa: BLE001 - the run goes on without a measurement
            if tracker is not None:  # its threads may be running
                with contextlib.suppress(Exception):
                    tracker.stop()
            self._fail(f"codecarbon could not start ({type(error).__name__}: {error})")
            return
        self._tracker, self._capture = tracker, capture
        self._details = {"hardware": hardware, "devices": _describe_devices(tracker)}
        self._last_log = (time.perf_counter(), 0.0)
        self.schedule.restart(self._last_log[0])
        log.info("CarbonTracker: codecarbon %s, %s, %s mode", codecarbon.__version__,
                 ", ".join(self._details["devices"].values()), self.tracking_mode)

    def stop(self) -> None:
        """Stops the tracker (once) and keeps its final totals."""
        if not self.running:
            return
        self._stopped = True
        try:
            self._tracker.stop()
        except Exception as error:  # noqa: BLE001 - keep the last flushed totals
            log.warning("CarbonTracker: codecarbon failed to stop (%s); keeping the last totals", error)

    def totals(self) -> dict[str, float] | None:
        """``{"kwh", "co2_kg", "duration_s"}`` so far (earlier segments included), measuring
        now if the tracker runs; ``None`` when nothing is measured."""
        if self._tracker is None:
            return None
        if self.running:
            self._tracker.flush()
        data = self._capture.last
        return {"kwh": self.previous["kwh"] + data.energy_consumed,
                "co2_kg": self.previous["co2_kg"] + data.emissions,
                "duration_s": self.previous["duration_s"] + data.duration}

    def summary_fields(self) -> dict[str, Any]:
        """``summary.json``'s ``"energy"`` (see :meth:`summary`)."""
        return {"energy": self.summary()}

    def summary(self) -> dict[str, Any]:
        """The ``"energy"`` object of ``summary.json``."""
        where = {"country_iso_code": self.country_iso_code, "region": self.region,
                 "tracking_mode": self.tracking_mode, "tool": TOOL}
        totals = self.totals()
        if totals is None:
            reason = self.reason or "the tracker never started (the fit did not reach on_fit_start)"
            return {"kwh": None, "co2_kg": None, "reason": reason, **where}
        data = self._capture.last
        return {
            "kwh": totals["kwh"],
            "co2_kg": totals["co2_kg"],
            "duration_s": round(totals["duration_s"], 2),
            "power_w_mean": _watts(totals["kwh"], totals["duration_s"]),
            "cpu_kwh": data.cpu_energy, "ram_kwh": data.ram_energy, "gpu_kwh": data.gpu_energy,
            "cpu_power_w": data.cpu_power, "ram_power_w": data.ram_power, "gpu_power_w": data.gpu_power,
            "kwh_before_resume": self.previous["kwh"],
            # How codecarbon measured each device: RAPL, a TDP constant, CPU-load mode, ...
            "method": self._details["devices"],
            "cpu_model": self._details["hardware"].get("cpu_model"),
            "cpu_count": self._details["hardware"].get("cpu_count"),
            "gpu_model": self._details["hardware"].get("gpu_model") or None,
            "country_name": data.country_name,
            "codecarbon_version": data.codecarbon_version,
            **where,
        }

    # --- checkpoints -------------------------------------------------------------------

    @override
    def state_dict(self) -> dict:
        return dict(self.totals() or self.previous)

    @override
    def load_state_dict(self, state_dict: dict) -> None:
        self.previous = {key: float(state_dict.get(key, 0.0)) for key in ("kwh", "co2_kg", "duration_s")}

    # --- helpers -----------------------------------------------------------------------

    def _fail(self, reason: str) -> None:
        self.reason = reason
        log.warning("CarbonTracker: no energy measurement for this run: %s", reason)

    def _log(self, trainer: L.Trainer, pl_module) -> None:
        totals = self.totals()
        if totals is None or trainer.logger is None:
            return
        now = time.perf_counter()
        then, kwh_then = self._last_log
        metrics = {"energy/kwh": totals["kwh"], "energy/co2_kg": totals["co2_kg"],
                   "energy/power_w": _watts(totals["kwh"] - kwh_then, now - then)}
        trainer.logger.log_metrics(metrics, step=pl_module.frames)
        self._last_log = (now, totals["kwh"])
        self.schedule.restart(now)

    def _finish(self, trainer: L.Trainer, pl_module) -> None:
        if not self.running:
            return
        self.stop()
        self._log(trainer, pl_module)


def _watts(kwh: float, seconds: float) -> float | None:
    return kwh * _KWH_TO_J / seconds if seconds > 0 else None


def _describe_devices(tracker) -> dict[str, str]:
    """``{"cpu": "cpu_load", "ram": "RAM()", ...}``: codecarbon's device and, where it has one,
    its measurement mode (``intel_rapl``, ``constant`` = TDP, ``cpu_load`` = TDP x load)."""
    devices = {}
    for device in getattr(tracker, "_hardware", []):
        name = type(device).__name__.lower()
        mode = getattr(device, "_mode", None)
        if name == "ram":
            forced = getattr(device, "_force_ram_power", None)
            mode = f"forced {forced} W" if forced is not None else "estimate from installed RAM size"
        devices[name] = f"{mode}" if mode else device.description()
    return devices


class _Capture:
    last = None


def _make_capture(base: type):
    """A codecarbon output handler that keeps the latest totals (flush() and stop() hand
    them to every handler), so nothing reads the tracker's private counters."""

    class Capture(base, _Capture):
        def out(self, total, delta):
            self.last = total

    return Capture()
