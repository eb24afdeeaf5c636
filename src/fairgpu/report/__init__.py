"""Human-facing reports (needs the ``report`` extra: ``pip install 'fairgpu[report]'``)."""
