"""A plugin that takes SLOW_START_S seconds to import inside a Ray actor (as importing torch can
on a loaded machine), and imports at once anywhere else (the driver, a local worker)."""
import time

import fusebench

SLOW_START_S = 6.0


def _in_a_ray_actor() -> bool:
    try:
        import ray
    except ImportError:
        return False
    return ray.is_initialized() and ray.get_runtime_context().get_actor_id() is not None


if _in_a_ray_actor():
    time.sleep(SLOW_START_S)


@fusebench.case(inputs=lambda shape, dtype, device, seed: (fusebench.randn(shape, dtype, device, seed),),
                shapes=[(8, n) for n in range(1, 4)])
def ray_slow_start(a):
    return a * 3
