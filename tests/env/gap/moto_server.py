"""moto's server as the test environment runs it: moto unchanged but for one lookup that does
not scale.

moto finds an EC2 resource's own tags by running DescribeTags with a resource-id filter,
which matches a regular expression against every tag of every resource in the region. Each
instance DescribeInstances renders (and each one a tag filter looks at) pays that scan, so a
listing costs (instances listed) x (tags in the region): with a few thousand instances
launched over a test run (terminated ones stay listed) a DescribeInstances that returned
nothing took 0.7 s and moto spent most of its CPU there (py-spy, 200-node run). Here the
resource's tags are read from moto's own tag table by id: the same entries, in the same
order, in the shape DescribeTags gives. Resource ids hold no wildcard characters, so the
anchored pattern moto builds from one matches that id alone and nothing else changes.

Usage: python moto_server.py [moto.server's arguments]
"""

import sys

from moto.ec2.models.core import TaggedEC2Resource
from moto.ec2.utils import EC2_PREFIX_TO_RESOURCE, get_prefix
from moto.server import main


def get_tags(self):
    """The resource's tags as moto's DescribeTags(resource-id=<id>) lists them."""
    if not self.id:
        return []
    # .get: reading must not add an empty entry to moto's defaultdict.
    tags = self.ec2_backend.tags.get(self.id) or {}
    kind = EC2_PREFIX_TO_RESOURCE.get(get_prefix(self.id), "")
    return [{"resource_id": self.id, "key": k, "value": v, "resource_type": kind}
            for k, v in tags.items()]


TaggedEC2Resource.get_tags = get_tags

if __name__ == "__main__":
    main(sys.argv[1:])
