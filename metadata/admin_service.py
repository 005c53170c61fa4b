"""AdminService on a controller: topics, configs, cluster and quorum (see proto/admin.proto).

Writes go through ``ActiveController.write`` (generate, commit one Raft entry, replay, answer); reads
are answered from the active controller's image after its term's barrier. A standby forwards every
call to the active controller (``ForwardingServicer``).
"""

from __future__ import annotations

from metadata import convert
from metadata.controller import QuorumController
from metadata.service import ActiveController, Forwarder, ForwardingServicer, error
from proto import admin_pb2, admin_pb2_grpc
from proto.errors import ErrorCode as Code
from raft.config import QuorumConfig


class AdminServicer(ForwardingServicer, admin_pb2_grpc.AdminServiceServicer):
    stub_class = admin_pb2_grpc.AdminServiceStub

    def __init__(self, active: ActiveController, forwarder: Forwarder, voters: QuorumConfig) -> None:
        super().__init__(active, forwarder)
        self.voters = voters

    @property
    def controller(self) -> QuorumController:
        return self.active.controller

    async def CreateTopics(self, request, context):
        async def handler():
            topics = convert.new_topics(request)
            results, _ = await self.active.write(
                lambda _now: self.controller.handle_create_topics(topics, request.validate_only)
            )
            out = admin_pb2.CreateTopicsResponse()
            for r in results:
                out.topics.add(
                    name=r.name,
                    topic_id=r.topic_id,
                    error=convert.error_pb(r.error),
                    num_partitions=r.num_partitions,
                    replication_factor=r.replication_factor,
                    configs=r.configs,
                )
            return out

        return await self._serve("CreateTopics", request, context, admin_pb2.CreateTopicsResponse, handler)

    async def DeleteTopics(self, request, context):
        async def handler():
            results, _ = await self.active.write(
                lambda _now: self.controller.handle_delete_topics(list(request.names))
            )
            out = admin_pb2.DeleteTopicsResponse()
            for r in results:
                out.topics.add(name=r.name, topic_id=r.topic_id, error=convert.error_pb(r.error))
            return out

        return await self._serve("DeleteTopics", request, context, admin_pb2.DeleteTopicsResponse, handler)

    async def CreatePartitions(self, request, context):
        async def handler():
            items = convert.new_partitions(request)
            results, _ = await self.active.write(
                lambda _now: self.controller.handle_create_partitions(items, request.validate_only)
            )
            out = admin_pb2.CreatePartitionsResponse()
            for r in results:
                out.topics.add(name=r.name, error=convert.error_pb(r.error))
            return out

        return await self._serve(
            "CreatePartitions", request, context, admin_pb2.CreatePartitionsResponse, handler
        )

    async def ListTopics(self, request, context):
        async def handler():
            await self.active.read()
            return convert.list_topics(self.controller.image)

        return await self._serve("ListTopics", request, context, admin_pb2.ListTopicsResponse, handler)

    async def DescribeTopics(self, request, context):
        async def handler():
            await self.active.read()
            return convert.describe_topics(self.controller.image, list(request.names))

        return await self._serve(
            "DescribeTopics", request, context, admin_pb2.DescribeTopicsResponse, handler
        )

    async def DescribeCluster(self, request, context):
        async def handler():
            await self.active.read()
            out = convert.describe_cluster(self.controller.image)
            out.controller_id = self.active.driver.node_id
            for v in self.voters.voters:
                out.controllers.add(node_id=v.node_id, host=v.host, port=v.port)
            return out

        return await self._serve(
            "DescribeCluster", request, context, admin_pb2.DescribeClusterResponse, handler
        )

    async def DescribeConfigs(self, request, context):
        async def handler():
            await self.active.read()
            return convert.describe_configs(self.controller.image, request)

        return await self._serve(
            "DescribeConfigs", request, context, admin_pb2.DescribeConfigsResponse, handler
        )

    async def AlterConfigs(self, request, context):
        async def handler():
            resources = convert.alter_configs_resources(request)
            if isinstance(resources, str):
                return admin_pb2.AlterConfigsResponse(error=error(Code.INVALID_REQUEST, resources))
            results, _ = await self.active.write(
                lambda _now: self.controller.handle_incremental_alter_configs(
                    resources, request.validate_only
                )
            )
            out = admin_pb2.AlterConfigsResponse()
            for r in results:
                out.results.add(
                    resource_type=int(r.resource_type),
                    resource_name=r.resource_name,
                    error=convert.error_pb(r.error),
                )
            return out

        return await self._serve("AlterConfigs", request, context, admin_pb2.AlterConfigsResponse, handler)

    async def ElectLeaders(self, request, context):
        async def handler():
            election = convert.elect_leaders_request(request)
            results, _ = await self.active.write(lambda _now: self.controller.handle_elect_leaders(election))
            out = admin_pb2.ElectLeadersResponse()
            for r in results:
                out.results.add(
                    topic=r.topic, partition=r.partition, error=convert.error_pb(r.error), leader=r.leader
                )
            return out

        return await self._serve("ElectLeaders", request, context, admin_pb2.ElectLeadersResponse, handler)

    async def DescribeQuorum(self, request, context):
        async def handler():
            await self.active.read()
            core = self.active.driver.core
            leo = core.last_index
            out = admin_pb2.DescribeQuorumResponse(
                leader_id=core.id, leader_epoch=core.term, high_watermark=core.commit_index
            )
            for v in self.voters.voters:
                if v.node_id == core.id:
                    out.voters.add(node_id=v.node_id, log_end_offset=leo, lag=0, status="Leader")
                else:
                    progress = core.progress.get(v.node_id)
                    match = progress.match_index if progress is not None else 0
                    out.voters.add(
                        node_id=v.node_id, log_end_offset=match, lag=leo - match, status="Follower"
                    )
            return out

        return await self._serve(
            "DescribeQuorum", request, context, admin_pb2.DescribeQuorumResponse, handler
        )
