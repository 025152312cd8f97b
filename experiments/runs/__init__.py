"""What a run is and how it is made: identified, recorded, resumed, swept, packed and probed."""
