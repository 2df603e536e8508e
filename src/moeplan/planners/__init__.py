"""moeplan.planners package."""
